"""Model FLOPs with document-aware attention, and MFU.

Count used (report it with the numbers): matmul FLOPs only, forward + backward = 3 x forward.
- dense part per token: 6 * (transformer matmul parameters + vocab * hidden for the output layer); for a
  mixture of experts only the parameters a token uses count (router, its top-k experts, shared expert);
- attention per layer, per document of length l: causal QK^T and AV cost 2 * l^2 * d_attn forward
  (half of the full l x l square), so 6 * d_attn * sum(l_i^2) per layer for forward + backward.
For a single document filling the sequence this is Megatron's causal count 6N + 6*L*d_attn*S per token;
with packing, attention FLOPs shrink to sum(l_i^2)/S^2 of that, which is what the hardware actually does.
Over data-parallel ranks the token counts and sum(l_i^2) are summed (each rank holds different documents).
MFU is reported against the dense BF16 peak, FP8 runs included (``mfu``); FP8 runs also get ``mfu_fp8_peak``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from midtrain.train.config import TrainConfig

FLOPS_COUNT = "matmul fwd+bwd, causal per-document attention (6N + 6*L*d_attn*sum(l_i^2)/tokens)"

# Dense BF16 peak TFLOP/s per device (no sparsity); the FP8 peak is twice that on these GPUs.
PEAK_BF16_TFLOPS = {
    "H200": 989.0,
    "H100": 989.0,
    "H800": 989.0,
    "B200": 2250.0,
    "B300": 2250.0,
    "GB200": 2500.0,
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.0,
}


def matmul_params(cfg: TrainConfig) -> int:
    """Parameters that take part in a matmul per token (no embeddings lookup, no norms); output layer included."""
    return cfg.model.param_count().flops_params  # MoE: router + top-k experts (+ shared) per token


def step_flops(cfg: TrainConfig, doc_lengths: list[list[int]]) -> float:
    """Model FLOPs of one step over the given packed sequences (each a list of piece lengths)."""
    tokens = sum(sum(seq) for seq in doc_lengths)
    sq = sum(n * n for seq in doc_lengths for n in seq)
    return flops_from_sums(cfg, tokens, sq)


def flops_from_sums(cfg: TrainConfig, tokens: float, sum_sq_lengths: float) -> float:
    """Model FLOPs from token count and sum of squared document lengths (sums over ranks add up)."""
    m = cfg.model
    d_attn = m.head_dim * m.num_attention_heads
    return 6.0 * matmul_params(cfg) * tokens + 6.0 * m.num_layers * d_attn * sum_sq_lengths


def peak_tflops(cfg: TrainConfig) -> float | None:
    """Peak TFLOP/s of one device for MFU: the recipe's log.peak_tflops, else the dense BF16 peak looked up
    by GPU name. FP8 runs are measured against the BF16 peak too: attention, the output layer and the
    BF16 end layers stay in BF16, so an FP8 peak would understate them (``fp8_peak_tflops`` gives it)."""
    if cfg.log.peak_tflops:
        return cfg.log.peak_tflops
    if not torch.cuda.is_available():
        return None
    return bf16_peak_for(torch.cuda.get_device_name())


def bf16_peak_for(device_name: str) -> float | None:
    """Dense BF16 peak TFLOP/s for a GPU name (None when unknown)."""
    name = device_name.upper()
    for key, value in sorted(PEAK_BF16_TFLOPS.items(), key=lambda kv: -len(kv[0])):
        if key in name:
            return value
    return None


def fp8_peak_tflops(cfg: TrainConfig, bf16_peak: float | None) -> float | None:
    """The FP8 dense peak (twice BF16) for runs with precision.fp8, else None: a second, labelled MFU."""
    return 2.0 * bf16_peak if bf16_peak and cfg.precision.fp8 != "none" else None
