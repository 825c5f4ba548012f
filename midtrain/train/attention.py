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

varlen_attn's keywords changed between torch releases, so the call is built from its signature (read once):
2.10 takes ``is_causal`` and neither ``scale`` nor ``window_size``; 2.11 takes ``scale`` and ``window_size``
(``(-1, 0)`` is causal) but no ``enable_gqa``; 2.12+ adds ``enable_gqa``. Without ``scale`` the query is
pre-scaled (the kernel applies 1/sqrt(d)); without ``enable_gqa`` the key/value heads are repeated to the
query heads (megatron's grouping: query head i reads group i // (heads / groups)). A signature with no causal
keyword at all leaves ``auto`` on per-document attention, with one log line saying why.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
VARLEN_POSITIONAL = 7  # query, key, value, cu_seq_q, cu_seq_k, max_q, max_k: the same in every release

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VarlenCall:
    """How this torch's ``varlen_attn`` is called: its causal keyword, and whether it takes the softmax scale
    and grouped key/value heads itself."""

    fn: Callable[..., Any]
    causal: tuple[str, object]  # ("window_size", (-1, 0)) from 2.11 on, ("is_causal", True) in 2.10
    takes_scale: bool
    takes_gqa: bool

    def __call__(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu: torch.Tensor, longest: int, scale: float
    ) -> torch.Tensor:
        """Causal attention within each cu-delimited document: [t, hq, d] and [t, hkv, d] in, [t, hq, d] out."""
        kwargs: dict[str, object] = {self.causal[0]: self.causal[1]}
        heads, groups = query.shape[1], key.shape[1]
        if groups != heads:
            if self.takes_gqa:
                kwargs["enable_gqa"] = True
            else:  # the kernel wants one key/value head per query head
                key, value = (x.repeat_interleave(heads // groups, dim=1) for x in (key, value))
        if self.takes_scale:
            kwargs["scale"] = scale
        elif not math.isclose(scale, 1.0 / math.sqrt(query.shape[-1]), rel_tol=1e-6):
            query = query * (scale * math.sqrt(query.shape[-1]))  # the kernel multiplies by 1/sqrt(d)
        return self.fn(query, key, value, cu, cu, longest, longest, **kwargs)


def plan_varlen_call(fn: Callable[..., Any]) -> VarlenCall | str:
    """The call for this ``varlen_attn`` from its signature, or why it cannot be used."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as e:
        return f"the signature of torch {torch.__version__}'s varlen_attn is unreadable ({e})"
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < VARLEN_POSITIONAL:
        return (
            f"torch {torch.__version__}'s varlen_attn takes {len(positional)} positional arguments, "
            f"not the {VARLEN_POSITIONAL} (q, k, v, cu_seq_q, cu_seq_k, max_q, max_k) this code passes"
        )
    if "window_size" in params:
        causal: tuple[str, object] = ("window_size", (-1, 0))
    elif "is_causal" in params:
        causal = ("is_causal", True)
    else:
        return (
            f"torch {torch.__version__}'s varlen_attn takes neither window_size nor is_causal, so it "
            "cannot mask causally"
        )
    return VarlenCall(fn, causal, takes_scale="scale" in params, takes_gqa="enable_gqa" in params)


@functools.cache
def varlen_call() -> VarlenCall | str:
    """This process's varlen call (read once), or why there is none (logged once)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        call: VarlenCall | str = f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn"
    else:
        call = plan_varlen_call(varlen_attn)
    if isinstance(call, str):
        log.warning("varlen attention is not used: %s; portable_attention=auto runs per-document SDPA", call)
    return call


def varlen_unsupported(q: torch.Tensor, dropout_p: float) -> str | None:
    """Why the varlen kernel cannot run these inputs (None when it can)."""
    if not q.is_cuda:
        return f"varlen attention runs on CUDA only (inputs are on {q.device})"
    if q.dtype not in VARLEN_DTYPES:
        return f"varlen attention needs fp16/bf16 inputs (got {q.dtype})"
    if dropout_p > 0:
        return f"varlen attention has no dropout (attention_dropout={dropout_p})"
    if q.shape[-1] > VARLEN_MAX_HEAD_DIM or q.shape[-1] % 8:
        return f"head dimension {q.shape[-1]} is not a multiple of 8 up to {VARLEN_MAX_HEAD_DIM}"
    call = varlen_call()  # last: a CPU or fp32 run never reads (or logs about) the signature
    return call if isinstance(call, str) else None


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
        raise ValueError(f"precision.portable_attention=varlen cannot run here: {why} (use auto or per_document)")
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
        tp = (
            pg_collection.tp.size()
            if pg_collection is not None and hasattr(pg_collection, "tp")
            else parallel_state.get_tensor_model_parallel_world_size()
        )
        self.heads_per_partition = divide(config.num_attention_heads, tp)
        self.groups_per_partition = divide(config.num_query_groups or config.num_attention_heads, tp)
        kv_channels = config.kv_channels
        self.softmax_scale = (
            softmax_scale
            if softmax_scale is not None
            else (config.softmax_scale if getattr(config, "softmax_scale", None) else 1.0 / math.sqrt(kv_channels))
        )
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout
        self.backend = getattr(config, BACKEND_ATTR, "auto")

    def _sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # q: [b, np, s, hn], k/v: [b, ng, s, hn]; GQA without materialising repeated key/value heads.
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            is_causal=True,
            scale=self.softmax_scale,
            dropout_p=self.dropout_p if self.training else 0.0,
            enable_gqa=self.groups_per_partition != self.heads_per_partition,
        )

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
            raise ValueError(
                f"portable document attention expects qkv_format='thd', got {packed_seq_params.qkv_format!r}"
            )
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
        outs = [
            self._sdpa(q[None, :, s:e], k[None, :, s:e], v[None, :, s:e])[0]
            for s, e in zip(bounds[:-1], bounds[1:])
            if e > s
        ]
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)  # [h, t, d]
        return out.transpose(0, 1).reshape(query.shape[0], -1)

    def _varlen(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        packed_seq_params: PackedSeqParams,
        bounds: list[int],
    ) -> torch.Tensor:
        """All documents in one flash-attention call: [t, h, d] in, [t, h*d] out."""
        call = varlen_call()
        assert not isinstance(call, str), call  # choose_backend picked varlen, so the call exists
        cu = getattr(packed_seq_params, DEVICE_BOUNDS_ATTR, None)
        if cu is None or cu.device != query.device:
            # one host-to-device copy per packed sequence, shared by every layer
            cu = torch.tensor(bounds, dtype=torch.int32, device=query.device)
            setattr(packed_seq_params, DEVICE_BOUNDS_ATTR, cu)
        longest = max(e - s for s, e in zip(bounds[:-1], bounds[1:]))
        out = call(query, key, value, cu, longest, self.softmax_scale)
        return out.reshape(query.shape[0], -1)
