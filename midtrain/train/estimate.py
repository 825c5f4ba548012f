"""Size, FLOPs and memory-per-GPU estimates for a ``TrainConfig`` (what ``midtrain config`` prints).

Counts are closed-form from the model shape, for the Llama-3 / Qwen3 decoder megatron-core builds
(RMSNorm, SwiGLU, GQA, optional QK-norm, tied or untied output layer; dense or Qwen3-MoE);
tests/test_estimate_*.py checks the parameter count against megatron-core's own model.

Mixture of experts: every expert is a parameter (memory) but a token only uses the router, its top-k
experts and the shared expert (FLOPs, MFU: N counts active parameters). Routed-expert weights are split
over expert x expert_tensor ranks instead of tensor ranks, and their optimizer state over the expert-data-
parallel ranks (world / (expert x expert_tensor x pipeline)) instead of data x context.

FLOPs per token use Megatron's current causal count, 6·N + 6·L·d_attn·S, computed by the trainer's
midtrain/train/flops.py (the same count its MFU uses): N is every parameter that takes part in a matmul
(all linear layers and the output layer, not the input embedding lookup), d_attn = heads × head_dim, and
attention over a causal S-token sequence costs half the full S². With document masking the attention
term scales by Σ lᵢ² / S² (documents of lengths lᵢ packed into S).

Memory per GPU assumes megatron-core's usual mixed precision: bf16 weights, fp32 gradient buffers (bf16
training accumulates and all-reduces grads in fp32), Adam with an fp32 master copy and two fp32 moments
(12 bytes/param), sharded over data × context parallel ranks with the distributed optimizer.
Activations assume flash/fused attention (no S² tensor is kept): per token and layer, bf16 copies of the two
norm inputs and outputs, q/k/v (+ QK-norm inputs), the attention output, fc1's output and the SwiGLU
output. ``recompute="full"`` keeps only each layer's input plus one layer's working set; ``"selective"``
recomputes the MLP with TE layers (the experts' activation for MoE; core attention on the local spec) and is
counted like "none" here: an upper bound.
The output layer's logits cost 6 bytes per token per vocabulary entry at their peak (the bf16 logits and
the fp32 softmax the vocab-parallel cross-entropy keeps for backward), divided by TP, on the last stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from midtrain.train.config import TrainConfig
    from midtrain.train.model_config import ModelConfig

GIB = 1024**3


@dataclass(frozen=True)
class GPU:
    name: str
    memory_bytes: int  # what the driver reports as total memory (nvidia-smi), not the marketing figure
    peak_bf16_tflops: float  # dense, no sparsity
    peak_fp8_tflops: float


GPUS: dict[str, GPU] = {
    "h100": GPU("H100 SXM 80GB", 81_559 * 1024**2, 989.0, 1979.0),
    "h200": GPU("H200 SXM 141GB", 143_771 * 1024**2, 989.0, 1979.0),
}

# Usable share of GPU memory: the caching allocator fragments, and NCCL/cuBLAS take workspace on top of
# the fixed overhead below. A plan above this share is reported as "tight", above 100% as "does not fit".
USABLE_FRACTION = 0.92
FIXED_OVERHEAD_BYTES = 4 * GIB  # CUDA context, NCCL buffers, cuBLAS/TE workspaces


# -- FLOPs ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flops:
    dense: float  # 6·N per token
    attention: float  # per token, causal over the whole packed sequence (or per document)

    @property
    def total(self) -> float:
        return self.dense + self.attention

    @property
    def attention_fraction(self) -> float:
        return self.attention / self.total


def flops_per_token(cfg: TrainConfig, doc_lengths: list[int] | None = None) -> Flops:
    """Training FLOPs (fwd + bwd) per token at ``cfg.data.seq_length``; ``doc_lengths`` = document masking.

    The count is the trainer's (midtrain/train/flops.py, also used for MFU): causal attention over S
    tokens costs 6·L·d_attn·S per token; with documents lᵢ packed (Σ lᵢ = S) S becomes Σ lᵢ² / S.
    """
    # lazy: loads torch only when this runs
    from midtrain.train.flops import matmul_params, step_flops

    S = cfg.data.seq_length
    docs = doc_lengths or [S]
    if sum(docs) != S:
        raise ValueError(f"doc_lengths sum to {sum(docs)}, not seq_length={S}")
    dense = 6.0 * matmul_params(cfg)
    return Flops(dense=dense, attention=step_flops(cfg, [docs]) / S - dense)


# -- memory ---------------------------------------------------------------------------------------------


def activation_bytes_per_token_layer(
    m: ModelConfig, tensor: int, sequence_parallel: bool, dtype_bytes: int = 2, expert_tensor: int = 1
) -> float:
    """Activations one layer keeps for backward, per token on one GPU (fused attention).

    MoE: per routed copy of a token (top-k of them; balanced routing brings as many to each rank as leave it)
    the permuted input and the expert output rows (2h), fc1 out (2f) and SwiGLU out (f) of the expert
    (÷ expert_tensor); the router's fp32 logits and scores (4 x num_experts in 2-byte units); a shared
    expert like a dense MLP. With sequence parallelism each tensor rank routes its share of the tokens."""
    h, f, d = m.hidden_size, m.ffn_hidden_size, m.head_dim
    q, kv = m.num_attention_heads * d, m.num_query_groups * d
    norm_terms = 4 * h  # input and output of the two RMSNorms (TE keeps the norm output for wgrad)
    mlp = 3 * f  # fc1 out (2f) + SwiGLU out (f)
    expert = 0.0
    if m.is_moe:
        assert m.num_experts is not None and m.moe_ffn_hidden_size is not None  # is_moe; ModelConfig.check needs both
        mlp = 3 * (m.moe_shared_expert_ffn_hidden_size or 0)
        expert = m.moe_router_topk * (2 * h + 3 * m.moe_ffn_hidden_size / expert_tensor) + 4 * m.num_experts
    sharded = 2 * q + 2 * kv + mlp  # q,k,v after RoPE + attention output; the MLP's
    if m.qk_layernorm:
        sharded += q + kv  # QK-norm inputs
    replicated = norm_terms / tensor if sequence_parallel else norm_terms
    routed = expert / tensor if sequence_parallel else expert
    return float(dtype_bytes) * (replicated + sharded / tensor + routed)


@dataclass
class MemoryEstimate:
    weights: float
    grads: float
    optimizer: float
    activations: float
    logits: float
    overhead: float = FIXED_OVERHEAD_BYTES
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.logits + self.overhead

    def verdict(self, gpu: GPU) -> str:
        share = self.total / gpu.memory_bytes
        if share <= USABLE_FRACTION:
            return f"fits ({share:.0%} of {gpu.name})"
        if share <= 1.0:
            return f"tight ({share:.0%} of {gpu.name}; fragmentation may push it over)"
        return f"does not fit ({share:.0%} of {gpu.name})"


def memory_per_gpu(cfg: TrainConfig, num_gpus: int | None = None) -> MemoryEstimate:
    """Peak memory on the most loaded GPU (first or last pipeline stage) for one micro-batch of 1 sequence.

    ``num_gpus`` sets the data-parallel size that shards the distributed optimizer; the default is the
    smallest job holding one model replica on whole 8-GPU nodes, so more nodes can only lower the figure.
    """
    m, p = cfg.model, cfg.parallel
    tp, pp, cp = p.tensor, p.pipeline, p.context
    replica = tp * pp * cp
    if num_gpus is None:
        num_gpus = max(8, math.ceil(replica / 8) * 8)
    dp = p.data or max(1, num_gpus // replica)
    num_gpus = dp * replica
    pc = m.param_count()
    layers_per_stage = math.ceil(m.num_layers / pp)
    stage_layers = layers_per_stage * pc.per_layer
    first = stage_layers + pc.embedding
    last = stage_layers + pc.final_norm + (pc.embedding if (m.tie_embeddings or pp == 1) else 0)
    if not m.tie_embeddings:
        last += pc.output_layer
    if pp == 1:  # one stage holds everything once
        first = last = pc.total
    ep, etp = p.expert, p.expert_tensor_size
    stage_experts = layers_per_stage * pc.expert_per_layer  # routed experts: split over EP x ETP, not TP
    expert_params = stage_experts / (ep * etp)
    stage_params = (max(first, last) - stage_experts) / tp + expert_params

    bf16 = cfg.precision.dtype == "bf16"
    weights = (2.0 if bf16 else 4.0) * stage_params
    fp8 = cfg.precision.fp8 != "none"
    if fp8:  # TE keeps an FP8 copy of each weight and of its transpose for the backward GEMMs
        weights += 2.0 * stage_params
    grads = 4.0 * stage_params
    opt_shards = dp * cp if p.distributed_optimizer else 1
    # experts' optimizer state is sharded over the expert-data-parallel ranks (the rest of the world)
    expert_opt_shards = max(1, num_gpus // (ep * etp * pp)) if p.distributed_optimizer else 1
    # bf16: fp32 master copy + two moments; fp32: the weights are the master, two moments only
    opt_bytes = 12.0 if bf16 else 8.0
    optimizer = opt_bytes * ((stage_params - expert_params) / opt_shards + expert_params / expert_opt_shards)

    tokens = cfg.data.seq_length / cp
    act_bytes = 2 if bf16 else 4
    per_layer = activation_bytes_per_token_layer(m, tp, p.sequence_parallel, act_bytes, etp) * tokens
    in_flight = pp  # 1F1B: the first stage holds pp micro-batches, i.e. all layers' worth
    layer_input = act_bytes * m.hidden_size * tokens / (tp if p.sequence_parallel else 1)
    if p.recompute == "full":
        acts_first = layer_input * layers_per_stage * in_flight + per_layer
    else:
        acts_first = per_layer * layers_per_stage * in_flight
    acts_last = (layer_input * layers_per_stage + per_layer) if p.recompute == "full" else per_layer * layers_per_stage
    logits = 6.0 * tokens * m.vocab_size / tp
    # The last stage holds 1 micro-batch plus the logits; the first holds pp micro-batches.
    if pp == 1 or acts_first >= acts_last + logits:
        activations, logit_bytes = acts_first, (logits if pp == 1 else 0.0)
    else:
        activations, logit_bytes = acts_last, logits

    notes = [
        f"optimizer sharded over {opt_shards} rank(s) (dp={dp} x cp={cp} at {num_gpus} GPUs)"
        if p.distributed_optimizer
        else "optimizer replicated (distributed_optimizer=false)"
    ]
    if m.is_moe:
        w = (2.0 if bf16 else 4.0) * expert_params
        notes.append(
            f"experts: {expert_params / 1e9:.2f}B routed-expert parameters on this GPU ({ep * etp} "
            f"way expert x expert_tensor split, {w / GIB:.1f} GiB of the weights); their optimizer "
            f"state sharded over {expert_opt_shards} expert-data-parallel rank(s)"
        )
    if fp8:
        notes.append(
            "FP8: weights include TE's FP8 weight copies; activations are counted in BF16 "
            "(TE saves some GEMM inputs in FP8, so the real figure is lower)"
        )
    if p.recompute == "selective":
        notes.append(
            "selective recompute (the MLP, or the experts' activation for MoE, with TE layers) is "
            "counted like none: the activations are an upper bound"
        )
    return MemoryEstimate(weights, grads, optimizer, activations, logit_bytes, notes=notes)


# -- the summary `midtrain config` prints ---------------------------------------------------------------


def _gib(x: float) -> str:
    return f"{x / GIB:7.1f} GiB"


def _count(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(int(n))


def summary(cfg: TrainConfig, num_gpus: int | None = None) -> str:
    """Human-readable size, FLOPs and memory-per-GPU estimate with a verdict per GPU kind."""
    m, p, S = cfg.model, cfg.parallel, cfg.data.seq_length
    pc = m.param_count()
    fl = flops_per_token(cfg)
    mem = memory_per_gpu(cfg, num_gpus)
    moe_line = (
        f", MoE {m.num_experts} experts top-{m.moe_router_topk}: {_count(pc.active)} active per token "
        f"({pc.active / pc.total:.0%})"
        if m.is_moe
        else ""
    )
    lines = [
        f"model: {m.family}, {_count(pc.total)} parameters ({_count(pc.total - pc.embedding - pc.output_layer)}"
        f" without embeddings{', tied output' if m.tie_embeddings else ''}){moe_line}",
        f"FLOPs/token at seq_length={S}: {fl.total / 1e9:.1f} GFLOP (6N = {fl.dense / 1e9:.1f}"
        f"{' with N = active parameters' if m.is_moe else ''}, causal "
        f"attention = {fl.attention / 1e9:.1f}, {fl.attention_fraction:.0%} of the total; document masking "
        f"cuts the attention part by Σlᵢ²/S²)",
        f"layout: TP={p.tensor} PP={p.pipeline} CP={p.context} SP={p.sequence_parallel} "
        + (f"EP={p.expert} ETP={p.expert_tensor_size} " if m.is_moe else "")
        + f"recompute={p.recompute} distributed_optimizer={p.distributed_optimizer}",
        "memory per GPU (most loaded stage, micro-batch 1):",
        f"  weights ({cfg.precision.dtype})         {_gib(mem.weights)}",
        f"  grads (fp32 buffer)    {_gib(mem.grads)}",
        f"  optimizer (fp32 Adam)  {_gib(mem.optimizer)}",
        f"  activations            {_gib(mem.activations)}",
        f"  logits + softmax       {_gib(mem.logits)}",
        f"  CUDA/NCCL overhead     {_gib(mem.overhead)}",
        f"  total                  {_gib(mem.total)}",
    ]
    lines += [f"  note: {n}" for n in mem.notes]
    target = next((k for k in GPUS if k in cfg.name.lower()), None)
    for key, gpu in GPUS.items():
        mark = "  <- target (from the run name)" if key == target else ""
        lines.append(f"verdict {gpu.name}: {mem.verdict(gpu)}{mark}")
    return "\n".join(lines)
