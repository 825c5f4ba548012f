"""Portable document-masked core attention (no Transformer Engine: CPU, or a GPU without TE).

A drop-in for megatron's ``DotProductAttention`` in the local layer spec. With a THD
``PackedSeqParams`` (micro-batch 1, ``cu_seqlens`` = document boundaries) it runs causal
``scaled_dot_product_attention`` on each document's slice, so attention never crosses a document and
memory grows with the longest document rather than with seq_length². Without packed params it is
plain causal attention over [s, b, h, d].

Backends for a packed sequence (``precision.portable_attention``): ``varlen`` is one flash-attention call
over all documents (``torch.nn.attention.varlen.varlen_attn``, CUDA with fp16/bf16 only); ``per_document``
is one SDPA call per document (runs everywhere; its Python loop costs more the more documents a sequence
holds); ``auto`` takes varlen where it can run and per-document elsewhere (the CPU, fp32, dropout).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.utils import divide

BOUNDS_ATTR = "_midtrain_bounds"  # python list of cu_seqlens, cached on PackedSeqParams (no device sync)
DEVICE_BOUNDS_ATTR = "_midtrain_device_bounds"  # int32 cu_seqlens on the attention's device, for varlen
BACKENDS = ("auto", "varlen", "per_document")
BACKEND_ATTR = "midtrain_portable_attention"  # set on megatron's TransformerConfig by midtrain.train.model
VARLEN_DTYPES = (torch.float16, torch.bfloat16)
VARLEN_MAX_HEAD_DIM = 256  # flash-attention's head-dimension limit


def varlen_available() -> bool:
    """Whether this torch ships the variable-length flash-attention entry point (PyTorch 2.10+)."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return True


def varlen_unsupported(q: torch.Tensor, dropout_p: float) -> str | None:
    """Why the varlen kernel cannot run these inputs (None when it can)."""
    if not varlen_available():
        return f"torch {torch.__version__} has no torch.nn.attention.varlen"
    if not q.is_cuda:
        return f"varlen attention runs on CUDA only (inputs are on {q.device})"
    if q.dtype not in VARLEN_DTYPES:
        return f"varlen attention needs fp16/bf16 inputs (got {q.dtype})"
    if dropout_p > 0:
        return f"varlen attention has no dropout (attention_dropout={dropout_p})"
    if q.shape[-1] > VARLEN_MAX_HEAD_DIM or q.shape[-1] % 8:
        return f"head dimension {q.shape[-1]} is not a multiple of 8 up to {VARLEN_MAX_HEAD_DIM}"
    return None


def choose_backend(setting: str, q: torch.Tensor, dropout_p: float) -> str:
    """The backend that runs a packed sequence: ``auto`` falls back quietly, an explicit ``varlen`` that
    cannot run is an error naming the setting."""
    if setting not in BACKENDS:
        raise ValueError(f"precision.portable_attention={setting!r}: expected one of {', '.join(BACKENDS)}")
    if setting == "per_document":
        return setting
    why = varlen_unsupported(q, dropout_p)
    if why is None:
        return "varlen"
    if setting == "varlen":
        raise ValueError(f"precision.portable_attention=varlen cannot run here: {why} "
                         "(use auto or per_document)")
    return "per_document"


def document_bounds(packed_seq_params: PackedSeqParams) -> list[int]:
    """The cu_seqlens of a packed sequence as Python ints (cached on the params object)."""
    bounds = getattr(packed_seq_params, BOUNDS_ATTR, None)
    if bounds is None:
        bounds = packed_seq_params.cu_seqlens_q.tolist()
        setattr(packed_seq_params, BOUNDS_ATTR, bounds)
    return bounds


class PortableDocumentAttention(MegatronModule):
    """Causal attention per document; same constructor and forward signature as DotProductAttention."""

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
        pg_collection=None,
    ):
        super().__init__(config=config)
        if config.context_parallel_size != 1:
            raise ValueError("portable document attention does not support context parallelism (needs TE)")
        if attention_type != "self":
            raise ValueError(f"portable document attention supports self-attention only, got {attention_type}")
        self.layer_number = layer_number
        self.attn_mask_type = attn_mask_type
        tp = (pg_collection.tp.size() if pg_collection is not None and hasattr(pg_collection, "tp")
              else parallel_state.get_tensor_model_parallel_world_size())
        self.heads_per_partition = divide(config.num_attention_heads, tp)
        self.groups_per_partition = divide(config.num_query_groups or config.num_attention_heads, tp)
        kv_channels = config.kv_channels
        self.softmax_scale = softmax_scale if softmax_scale is not None else (
            config.softmax_scale if getattr(config, "softmax_scale", None) else 1.0 / math.sqrt(kv_channels))
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout
        self.backend = getattr(config, BACKEND_ATTR, "auto")

    def _sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # q: [b, np, s, hn], k/v: [b, ng, s, hn]; GQA without materialising repeated key/value heads.
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.softmax_scale,
            dropout_p=self.dropout_p if self.training else 0.0,
            enable_gqa=self.groups_per_partition != self.heads_per_partition)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: PackedSeqParams | None = None,
    ) -> torch.Tensor:
        if attention_bias is not None:
            raise ValueError("portable document attention does not take an attention bias")
        if packed_seq_params is None:
            # [s, b, h, d] -> [b, h, s, d]; plain causal (one document per sequence).
            s, b = query.shape[0], query.shape[1]
            out = self._sdpa(*(x.permute(1, 2, 0, 3) for x in (query, key, value)))
            return out.permute(2, 0, 1, 3).reshape(s, b, -1)
        if packed_seq_params.qkv_format != "thd":
            raise ValueError(f"portable document attention expects qkv_format='thd', got "
                             f"{packed_seq_params.qkv_format!r}")
        if query.dim() == 4:  # [t, 1, h, d] when the caller did not squeeze the dummy batch dim
            query, key, value = (x.squeeze(1) for x in (query, key, value))
        bounds = document_bounds(packed_seq_params)
        if bounds[-1] != query.shape[0]:
            raise ValueError(f"cu_seqlens ends at {bounds[-1]} but the packed sequence has {query.shape[0]} tokens")
        dropout = self.dropout_p if self.training else 0.0
        if choose_backend(self.backend, query, dropout) == "varlen":
            return self._varlen(query, key, value, packed_seq_params, bounds)
        # [t, h, d] -> [h, t, d]: each document is a contiguous slice of the token axis.
        q, k, v = (x.transpose(0, 1) for x in (query, key, value))
        outs = [self._sdpa(q[None, :, s:e], k[None, :, s:e], v[None, :, s:e])[0]
                for s, e in zip(bounds[:-1], bounds[1:]) if e > s]
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)  # [h, t, d]
        return out.transpose(0, 1).reshape(query.shape[0], -1)

    def _varlen(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                packed_seq_params: PackedSeqParams, bounds: list[int]) -> torch.Tensor:
        """All documents in one flash-attention call: [t, h, d] in, [t, h*d] out."""
        from torch.nn.attention.varlen import varlen_attn

        cu = getattr(packed_seq_params, DEVICE_BOUNDS_ATTR, None)
        if cu is None or cu.device != query.device:
            # one host-to-device copy per packed sequence, shared by every layer
            cu = torch.tensor(bounds, dtype=torch.int32, device=query.device)
            setattr(packed_seq_params, DEVICE_BOUNDS_ATTR, cu)
        longest = max(e - s for s, e in zip(bounds[:-1], bounds[1:]))
        out = varlen_attn(query, key, value, cu, cu, longest, longest, scale=self.softmax_scale,
                          window_size=(-1, 0), enable_gqa=self.groups_per_partition != self.heads_per_partition)
        return out.reshape(query.shape[0], -1)  # type: ignore[union-attr]  # a tuple only with return_aux
