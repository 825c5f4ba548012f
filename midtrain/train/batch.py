"""One packed sequence from the shard reader (midtrain.formats.shard_reader) -> the GPTModel's THD inputs.

Micro-batch 1, document boundaries as ``PackedSeqParams(qkv_format="thd")`` for both attention paths
(TE and portable). With context parallelism (TE only) each rank keeps its load-balanced share of every
document (megatron-core's ``get_thd_batch_on_this_cp_rank``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from megatron.core.packed_seq_params import PackedSeqParams

from midtrain.train.attention import BOUNDS_ATTR


@dataclass
class Batch:
    tokens: torch.Tensor  # [1, S] int64
    labels: torch.Tensor  # [1, S] int64
    loss_mask: torch.Tensor  # [1, S] float32
    position_ids: torch.Tensor  # [1, S] int64
    source_ids: torch.Tensor  # [1, S] int64, -1 on padding
    packed_seq_params: PackedSeqParams
    index: int  # dataset index of the packed sequence (for error messages)
    doc_lengths: list[int]  # piece lengths (padding piece included), for attention FLOPs

    @property
    def num_tokens(self) -> int:
        return self.tokens.shape[1]


def to_batch(
    sample: dict[str, torch.Tensor],
    device: torch.device | str = "cpu",
    cp_size: int = 1,
    cp_rank: int = 0,
    cu_seqlens_on_host: bool = False,
) -> Batch:
    """Build a Batch (on ``device``) from a reader sample; validates the shapes the model relies on.

    ``cu_seqlens_on_host``: keep the document boundaries on the CPU (the portable attention path). There the
    only reader of ``cu_seqlens`` besides our attention is megatron's unfused packed RoPE, which turns it into
    Python lengths for q and k in every layer: on the host that costs no GPU synchronisation.
    """
    tokens = sample["tokens"]
    S = tokens.shape[-1]
    cu = sample["cu_seqlens"].to(torch.int32)
    index = int(sample["index"]) if "index" in sample else -1
    if cu.dim() != 1 or int(cu[0]) != 0 or int(cu[-1]) != S or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"packed sequence {index}: cu_seqlens {cu.tolist()[:8]}... do not partition {S} tokens")
    bounds = cu.tolist()
    lengths = [e - s for s, e in zip(bounds[:-1], bounds[1:])]
    non_blocking = torch.device(device).type == "cuda"
    fields = {
        k: sample[k].reshape(1, S).to(device, non_blocking=non_blocking)
        for k in ("tokens", "labels", "loss_mask", "position_ids", "source_ids")
    }
    cu_dev = cu.to(device, non_blocking=non_blocking)
    max_len = max(lengths)
    if cp_size > 1:
        from megatron.core.utils import get_thd_batch_on_this_cp_rank

        unpadded = sample.get("cu_seqlens_unpadded", cu).to(torch.int32).to(device)
        fields, psp = get_thd_batch_on_this_cp_rank(
            fields, unpadded, cu_dev, torch.tensor([max_len]), cp_size=cp_size, cp_rank=cp_rank
        )
    else:
        cu_psp = cu if cu_seqlens_on_host else cu_dev
        psp = PackedSeqParams(
            qkv_format="thd", cu_seqlens_q=cu_psp, cu_seqlens_kv=cu_psp, max_seqlen_q=max_len, max_seqlen_kv=max_len
        )
        setattr(psp, BOUNDS_ATTR, bounds)  # the portable attention slices with these, no device sync
    return Batch(packed_seq_params=psp, index=index, doc_lengths=lengths, **fields)
