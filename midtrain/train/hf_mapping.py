"""Hugging Face <-> megatron-core: configs and weights, by the tables of a model family's spec.

Each family's facts (Hugging Face names, weight-name rows, the config.json keys it fixes, its MoE variant)
are in its spec under midtrain/train/families/; this module applies them, the same way for every family:

- ``layer_rows``: per decoder layer, megatron-core's parameter name (local spec) -> the Hugging Face
  name(s) it is made of; ``global_rows`` for embedding, final norm and output layer.
- fused QKV: megatron stores ``linear_qkv`` per query group as [q heads of the group..., k, v] rows
  (``num_query_groups`` blocks of (heads/groups + 2) x head_dim rows), so a tensor-parallel split along
  rows hands each rank whole groups. HF keeps q_proj / k_proj / v_proj apart.
- fused fc1: megatron's SwiGLU ``linear_fc1`` is [gate; up] along rows; HF has gate_proj and up_proj.
- MoE: the dense MLP rows give way to the spec's ``moe.rows`` (router and one fc1/fc2 pair per expert).

Transformer Engine's layer spec fuses each RMSNorm into the following linear layer, so the same weights
appear under two other names (``TE_NORM_NAMES``); ``to_spec_names`` translates to what a model has.
The tests check all of this by logits parity against transformers, not by assumption.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from midtrain.config import ConfigError
from midtrain.train import families, hf_rope
from midtrain.train.families import Row

DENSE_MLP = {"mlp.linear_fc1.weight", "mlp.linear_fc2.weight"}
QK_NORM = {"self_attention.q_layernorm.weight", "self_attention.k_layernorm.weight"}
# config.json values every family's tables assume: a config.json with another value is refused on import
REFUSED_UNLESS = {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "use_sliding_window": False}
TE_NORM_NAMES = {
    "input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
    "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
}
# HF keys that carry no weights (older checkpoints saved RoPE buffers).
HF_IGNORED = re.compile(r".*\.rotary_emb\.inv_freq$")
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class Shape:
    """What the tensor layout depends on."""

    num_layers: int
    num_attention_heads: int
    num_query_groups: int
    head_dim: int
    hidden_size: int
    qk_layernorm: bool
    tie_embeddings: bool
    num_experts: int = 0  # 0 = dense MLP
    family: str = "qwen3"  # whose weight tables (midtrain/train/families/)

    @classmethod
    def of(cls, m: Any) -> Shape:
        """From a ModelConfig."""
        return cls(
            m.num_layers,
            m.num_attention_heads,
            m.num_query_groups,
            m.head_dim,
            m.hidden_size,
            m.qk_layernorm,
            m.tie_embeddings,
            int(getattr(m, "num_experts", None) or 0),
            m.family,
        )


# -- configs --------------------------------------------------------------------------------------------


def model_fields_from_hf(hf: dict[str, Any], where: str = "config.json") -> dict[str, Any]:
    """ModelConfig field values from a Hugging Face config dict; refuses what the tables cannot map."""
    spec, moe = families.by_model_type(hf.get("model_type"), where)
    for key, want in REFUSED_UNLESS.items():
        got = hf.get(key, want)
        if got != want:
            raise ConfigError(f"{where}: {key}={got!r} is not supported (the {spec.name} table expects {want!r})")
    heads = int(hf["num_attention_heads"])
    head_dim = int(hf.get("head_dim") or hf["hidden_size"] // heads)
    rope_params = hf.get("rope_parameters") or {
        "rope_theta": hf.get("rope_theta", 10_000.0),
        **(hf.get("rope_scaling") or {}),
    }
    fields = dict(
        family=spec.name,
        num_layers=int(hf["num_hidden_layers"]),
        hidden_size=int(hf["hidden_size"]),
        ffn_hidden_size=int(hf["intermediate_size"]),
        num_attention_heads=heads,
        num_query_groups=int(hf.get("num_key_value_heads") or heads),
        kv_channels=head_dim,
        vocab_size=int(hf["vocab_size"]),
        max_position_embeddings=int(hf["max_position_embeddings"]),
        qk_layernorm=spec.qk_layernorm,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        norm_epsilon=float(hf.get("rms_norm_eps", 1e-6)),
        init_method_std=float(hf.get("initializer_range", 0.02)),
    )
    fields.update(hf_rope.from_hf_rope_parameters(rope_params, where))
    if moe and spec.moe:
        fields.update(spec.moe.fields_from_hf(hf, where))
    return fields


def check_exportable(m: Any) -> None:
    """Refuse models the family's Hugging Face layouts cannot hold (before anything is written)."""
    moe = families.family(m.family).moe
    if getattr(m, "moe_shared_expert_ffn_hidden_size", None) and not (moe and moe.shared_expert):
        raise ConfigError(
            f"model.moe_shared_expert_ffn_hidden_size: {moe.name if moe else m.family} has no shared expert, so this "
            "model has no Hugging Face layout to export to"
        )
    if not getattr(m, "is_moe", False):
        return
    if moe is None:
        with_moe = [name for name, spec in families.FAMILIES.items() if spec.moe]
        raise ConfigError(
            f"model.family: no Hugging Face MoE layout for {m.family!r} (supported: {', '.join(with_moe)})"
        )
    if m.moe_router_score_function != moe.score_function:
        raise ConfigError(f"model.moe_router_score_function: {moe.name} routes with {moe.score_function}")


def hf_config_dict(m: Any, base: dict[str, Any] | None = None, dtype: str = "bfloat16") -> dict[str, Any]:
    """A Hugging Face config.json dict for ModelConfig ``m``.

    ``base`` (the source model's original config.json, when known) keeps what the tables do not own
    (bos/eos ids, generation-related fields); every architectural field is overwritten from ``m``.
    RoPE is written twice: ``rope_parameters`` (transformers >= 5) and the legacy ``rope_theta`` /
    ``rope_scaling`` keys that inference engines still read.
    """
    check_exportable(m)
    spec = families.family(m.family)
    arch = spec.moe.hf if m.is_moe and spec.moe else spec.hf
    out = {k: v for k, v in (base or {}).items() if k not in ("rope_scaling", "rope_theta", "rope_parameters")}
    out.update(
        model_type=arch.model_type,
        architectures=[arch.architecture],
        hidden_size=m.hidden_size,
        intermediate_size=m.ffn_hidden_size,
        num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_attention_heads,
        num_key_value_heads=m.num_query_groups,
        head_dim=m.head_dim,
        vocab_size=m.vocab_size,
        max_position_embeddings=m.max_position_embeddings,
        rms_norm_eps=m.norm_epsilon,
        tie_word_embeddings=m.tie_embeddings,
        hidden_act="silu",
        attention_bias=False,
        initializer_range=m.init_method_std,
        dtype=dtype,
        rope_parameters=hf_rope.to_hf_rope_parameters(m),
        **hf_rope.legacy_hf_rope_keys(m),
    )
    out.update(spec.hf_fixed)
    if m.is_moe and spec.moe:
        out.pop("num_local_experts", None)
        out.update(spec.moe.hf_fields(m))
    out.pop("torch_dtype", None)
    return out


# -- tensors --------------------------------------------------------------------------------------------


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: Shape) -> torch.Tensor:
    """HF q/k/v projections -> megatron's per-group interleaved linear_qkv weight."""
    g, d = s.num_query_groups, s.head_dim
    per_group = s.num_attention_heads // g
    h = q.shape[-1]
    return torch.cat([q.reshape(g, per_group * d, h), k.reshape(g, d, h), v.reshape(g, d, h)], dim=1).reshape(-1, h)


def split_qkv(qkv: torch.Tensor, s: Shape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g, d = s.num_query_groups, s.head_dim
    per_group = s.num_attention_heads // g
    h = qkv.shape[-1]
    q, k, v = qkv.reshape(g, (per_group + 2) * d, h).split([per_group * d, d, d], dim=1)
    return q.reshape(-1, h), k.reshape(-1, h), v.reshape(-1, h)


def _layer_entries(s: Shape) -> list[Row]:
    spec = families.family(s.family)
    rows = [
        e
        for e in spec.layer_rows
        if (s.qk_layernorm or e[0] not in QK_NORM) and not (s.num_experts and e[0] in DENSE_MLP)
    ]
    if not s.num_experts:
        return rows
    if spec.moe is None:
        raise ConfigError(f"model.family: {s.family!r} has no mixture-of-experts layout")
    return rows + spec.moe.rows(s.num_experts)


def _global_entries(s: Shape) -> list[tuple[str, str]]:
    """The spec's embedding, final norm and output layer; a tied model has no output layer of its own."""
    rows = families.family(s.family).global_rows
    return [(mc, hf) for mc, hf in rows if not (mc == "output_layer.weight" and s.tie_embeddings)]


class McoreView(Mapping):
    """megatron-core (local-spec) name -> tensor, computed from the HF tensors on access.

    Completeness is checked up front from the names alone (a missing or unmapped HF tensor is an error
    before anything is read), so a rank that needs only its pipeline stage and tensor-parallel shard reads
    only those HF tensors (safetensors are opened lazily).
    """

    def __init__(self, hf: Mapping[str, torch.Tensor], s: Shape) -> None:
        self._hf, self._s = hf, s
        names = {k for k in hf.keys() if not HF_IGNORED.match(k)}  # keys only: hf may read lazily
        self._plan: dict[str, tuple[tuple[str, ...], str]] = {}
        for i in range(s.num_layers):
            for mc, hf_names, how in _layer_entries(s):
                self._plan[f"decoder.layers.{i}.{mc}"] = (tuple(f"model.layers.{i}.{n}" for n in hf_names), how)
        for mc, hf_name in _global_entries(s):
            self._plan[mc] = ((hf_name,), "copy")
        used = {n for srcs, _ in self._plan.values() for n in srcs}
        missing = sorted(used - names)
        if missing:
            raise KeyError(
                f"Hugging Face weights lack {missing[0]!r}"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            )
        if s.tie_embeddings:
            used.add("lm_head.weight")  # some tied checkpoints still store lm_head; it equals the embedding
        extra = sorted(names - used)
        if extra:
            raise KeyError(
                f"Hugging Face weights have tensors the table does not map: {extra[:8]}"
                + (f" (+{len(extra) - 8} more)" if len(extra) > 8 else "")
            )

    def __getitem__(self, key: str) -> torch.Tensor:
        srcs, how = self._plan[key]
        parts = [self._hf[n] for n in srcs]
        if how == "qkv":
            q, k, v = parts
            return fuse_qkv(q, k, v, self._s)
        return torch.cat(parts, 0) if how == "fc1" else parts[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._plan)

    def __len__(self) -> int:
        return len(self._plan)


def hf_to_mcore(hf: Mapping[str, torch.Tensor], s: Shape) -> dict[str, torch.Tensor]:
    """Full (unsharded) megatron-core local-spec state dict from an HF state dict. Checks completeness."""
    return dict(McoreView(hf, s).items())


def mcore_to_hf(
    mc: dict[str, torch.Tensor], s: Shape, progress: Callable[[int, int], None] | None = None
) -> dict[str, torch.Tensor]:
    """HF state dict from a full megatron-core state dict (local-spec or TE names); ``progress(layer, n)``
    is called after each layer."""
    mc = from_te_names(mc)
    out: dict[str, torch.Tensor] = {}
    for i in range(s.num_layers):
        if progress and i:
            progress(i, s.num_layers)
        for mc_name, hf_names, how in _layer_entries(s):
            key = f"decoder.layers.{i}.{mc_name}"
            if key not in mc:
                raise KeyError(f"megatron-core weights lack {key!r}")
            t = mc[key]
            parts = split_qkv(t, s) if how == "qkv" else t.chunk(2, 0) if how == "fc1" else (t,)
            for n, p in zip(hf_names, parts):
                out[f"model.layers.{i}.{n}"] = p.contiguous()
    for mc_name, hf_name in _global_entries(s):
        if mc_name not in mc:
            raise KeyError(f"megatron-core weights lack {mc_name!r}")
        out[hf_name] = mc[mc_name]
    if progress:
        progress(s.num_layers, s.num_layers)
    return out


def _rename_layer_params(sd: dict[str, torch.Tensor], names: dict[str, str]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in sd.items():
        m = _LAYER.match(k)
        if m and m.group(2) in names:
            k = f"decoder.layers.{m.group(1)}.{names[m.group(2)]}"
        out[k] = v
    return out


def to_te_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Local-spec names -> Transformer Engine spec names (norms fused into the next linear layer)."""
    return _rename_layer_params(sd, TE_NORM_NAMES)


def from_te_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return _rename_layer_params(sd, {te: local for local, te in TE_NORM_NAMES.items()})


def local_spec_name(name: str) -> str:
    """One name in local-spec form (TE's fused-norm names mapped back)."""
    m = _LAYER.match(name)
    if m:
        for local, te in TE_NORM_NAMES.items():
            if m.group(2) == te:
                return f"decoder.layers.{m.group(1)}.{local}"
    return name


def uses_te_names(model_keys: list[str] | set[str]) -> bool:
    return any(k.endswith("linear_qkv.layer_norm_weight") for k in model_keys)
