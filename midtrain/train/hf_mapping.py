"""Hugging Face <-> megatron-core tables for the Llama-3 and Qwen3 dense families and Qwen3-MoE.

Two tables and two layout rules cover both families (megatron-bridge does the same for more models, but
does not install here):

- ``LAYER_TABLE``: per decoder layer, megatron-core's parameter name (local spec) -> the Hugging Face
  name(s) it is made of; ``GLOBAL_TABLE`` for embedding, final norm and output layer.
- fused QKV: megatron stores ``linear_qkv`` per query group as [q heads of the group..., k, v] rows
  (``num_query_groups`` blocks of (heads/groups + 2) x head_dim rows), so a tensor-parallel split along
  rows hands each rank whole groups. HF keeps q_proj / k_proj / v_proj apart.
- fused fc1: megatron's SwiGLU ``linear_fc1`` is [gate; up] along rows; HF has gate_proj and up_proj.
- Qwen3-MoE: the MLP rows of ``LAYER_TABLE`` give way to ``moe_entries``: the router (HF ``mlp.gate``) and
  one fc1/fc2 pair per expert (HF ``mlp.experts.E.{gate,up,down}_proj``, the released checkpoints' layout;
  megatron's local spec numbers experts ``mlp.experts.local_experts.E``, per expert-parallel rank).

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
from midtrain.train import hf_rope

# HF model_type -> ModelConfig.family, and back (with the HF class names written into config.json).
FAMILY_OF_MODEL_TYPE = {"qwen3": "qwen3", "llama": "llama3", "qwen3_moe": "qwen3"}
HF_ARCH = {"qwen3": ("qwen3", "Qwen3ForCausalLM"), "llama3": ("llama", "LlamaForCausalLM")}
HF_ARCH_MOE = {"qwen3": ("qwen3_moe", "Qwen3MoeForCausalLM")}

LAYER_TABLE: list[tuple[str, tuple[str, ...], str]] = [
    # (megatron-core suffix, HF suffixes, how they combine)
    ("input_layernorm.weight", ("input_layernorm.weight",), "copy"),
    (
        "self_attention.linear_qkv.weight",
        ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
        "qkv",
    ),
    ("self_attention.q_layernorm.weight", ("self_attn.q_norm.weight",), "copy"),  # Qwen3 QK-norm
    ("self_attention.k_layernorm.weight", ("self_attn.k_norm.weight",), "copy"),
    ("self_attention.linear_proj.weight", ("self_attn.o_proj.weight",), "copy"),
    ("pre_mlp_layernorm.weight", ("post_attention_layernorm.weight",), "copy"),
    ("mlp.linear_fc1.weight", ("mlp.gate_proj.weight", "mlp.up_proj.weight"), "fc1"),
    ("mlp.linear_fc2.weight", ("mlp.down_proj.weight",), "copy"),
]
DENSE_MLP = {"mlp.linear_fc1.weight", "mlp.linear_fc2.weight"}


def moe_entries(num_experts: int) -> list[tuple[str, tuple[str, ...], str]]:
    """The MLP rows of a Qwen3-MoE layer: router, then fc1 = [gate; up] and fc2 = down per expert."""
    rows: list[tuple[str, tuple[str, ...], str]] = [("mlp.router.weight", ("mlp.gate.weight",), "copy")]
    for e in range(num_experts):
        rows += [
            (
                f"mlp.experts.local_experts.{e}.linear_fc1.weight",
                (f"mlp.experts.{e}.gate_proj.weight", f"mlp.experts.{e}.up_proj.weight"),
                "fc1",
            ),
            (f"mlp.experts.local_experts.{e}.linear_fc2.weight", (f"mlp.experts.{e}.down_proj.weight",), "copy"),
        ]
    return rows


GLOBAL_TABLE: list[tuple[str, str]] = [
    ("embedding.word_embeddings.weight", "model.embed_tokens.weight"),
    ("decoder.final_layernorm.weight", "model.norm.weight"),
    ("output_layer.weight", "lm_head.weight"),  # untied models only
]
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
        )


# -- configs --------------------------------------------------------------------------------------------


def model_fields_from_hf(hf: dict[str, Any], where: str = "config.json") -> dict[str, Any]:
    """ModelConfig field values from a Hugging Face config dict; refuses what the tables cannot map."""
    model_type = hf.get("model_type")
    if model_type not in FAMILY_OF_MODEL_TYPE:
        raise ConfigError(
            f"{where}: model_type {model_type!r} is not supported (supported: {', '.join(FAMILY_OF_MODEL_TYPE)})"
        )
    family = FAMILY_OF_MODEL_TYPE[model_type]
    refuse = {
        "hidden_act": ("silu", hf.get("hidden_act", "silu")),
        "attention_bias": (False, hf.get("attention_bias", False)),
        "mlp_bias": (False, hf.get("mlp_bias", False)),
        "use_sliding_window": (False, hf.get("use_sliding_window", False)),
    }
    for key, (want, got) in refuse.items():
        if got != want:
            raise ConfigError(f"{where}: {key}={got!r} is not supported (the {family} table expects {want!r})")
    heads = int(hf["num_attention_heads"])
    head_dim = int(hf.get("head_dim") or hf["hidden_size"] // heads)
    rope_params = hf.get("rope_parameters") or {
        "rope_theta": hf.get("rope_theta", 10_000.0),
        **(hf.get("rope_scaling") or {}),
    }
    fields = dict(
        family=family,
        num_layers=int(hf["num_hidden_layers"]),
        hidden_size=int(hf["hidden_size"]),
        ffn_hidden_size=int(hf["intermediate_size"]),
        num_attention_heads=heads,
        num_query_groups=int(hf.get("num_key_value_heads") or heads),
        kv_channels=head_dim,
        vocab_size=int(hf["vocab_size"]),
        max_position_embeddings=int(hf["max_position_embeddings"]),
        qk_layernorm=family == "qwen3",
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        norm_epsilon=float(hf.get("rms_norm_eps", 1e-6)),
        init_method_std=float(hf.get("initializer_range", 0.02)),
    )
    fields.update(hf_rope.from_hf_rope_parameters(rope_params, where))
    if model_type == "qwen3_moe":
        fields.update(_moe_fields_from_hf(hf, where))
    return fields


def _moe_fields_from_hf(hf: dict[str, Any], where: str) -> dict[str, Any]:
    """ModelConfig MoE fields from a Qwen3-MoE config.json (every layer an MoE layer, no shared expert)."""
    if hf.get("mlp_only_layers"):
        raise ConfigError(
            f"{where}: mlp_only_layers={hf['mlp_only_layers']!r} is not supported (every layer must be an MoE layer)"
        )
    if int(hf.get("decoder_sparse_step", 1)) != 1:
        raise ConfigError(
            f"{where}: decoder_sparse_step={hf['decoder_sparse_step']!r} is not supported (every "
            "layer must be an MoE layer)"
        )
    experts = hf.get("num_experts") or hf.get("num_local_experts")
    if not experts:
        raise ConfigError(f"{where}: model_type qwen3_moe without num_experts")
    return dict(
        num_experts=int(experts),
        moe_ffn_hidden_size=int(hf["moe_intermediate_size"]),
        moe_router_topk=int(hf["num_experts_per_tok"]),
        moe_router_score_function="softmax",
        moe_router_topk_norm=bool(hf.get("norm_topk_prob", False)),
        moe_aux_loss_coeff=float(hf.get("router_aux_loss_coef", 1e-3)),
    )


def check_exportable(m: Any) -> None:
    """Refuse models the Hugging Face families cannot hold (before anything is written)."""
    if getattr(m, "moe_shared_expert_ffn_hidden_size", None):
        raise ConfigError(
            "model.moe_shared_expert_ffn_hidden_size: Qwen3-MoE has no shared expert, so this "
            "model has no Hugging Face layout to export to"
        )
    if getattr(m, "is_moe", False) and m.family not in HF_ARCH_MOE:
        raise ConfigError(
            f"model.family: no Hugging Face MoE layout for {m.family!r} (supported: {', '.join(HF_ARCH_MOE)})"
        )
    if getattr(m, "is_moe", False) and m.moe_router_score_function != "softmax":
        raise ConfigError("model.moe_router_score_function: Qwen3-MoE routes with softmax")


def hf_config_dict(m: Any, base: dict[str, Any] | None = None, dtype: str = "bfloat16") -> dict[str, Any]:
    """A Hugging Face config.json dict for ModelConfig ``m``.

    ``base`` (the source model's original config.json, when known) keeps what the tables do not own
    (bos/eos ids, generation-related fields); every architectural field is overwritten from ``m``.
    RoPE is written twice: ``rope_parameters`` (transformers >= 5) and the legacy ``rope_theta`` /
    ``rope_scaling`` keys that inference engines still read.
    """
    check_exportable(m)
    model_type, arch = (HF_ARCH_MOE if m.is_moe else HF_ARCH)[m.family]
    out = {k: v for k, v in (base or {}).items() if k not in ("rope_scaling", "rope_theta", "rope_parameters")}
    out.update(
        model_type=model_type,
        architectures=[arch],
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
    if m.family == "llama3":
        out["mlp_bias"] = False
    else:
        out["use_sliding_window"] = False
    if m.is_moe:
        out.pop("num_local_experts", None)
        out.update(
            num_experts=m.num_experts,
            moe_intermediate_size=m.moe_ffn_hidden_size,
            num_experts_per_tok=m.moe_router_topk,
            norm_topk_prob=m.moe_router_topk_norm,
            router_aux_loss_coef=m.moe_aux_loss_coeff,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
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


QK_NORM = {"self_attention.q_layernorm.weight", "self_attention.k_layernorm.weight"}


def _layer_entries(s: Shape) -> list[tuple[str, tuple[str, ...], str]]:
    rows = [
        e for e in LAYER_TABLE if (s.qk_layernorm or e[0] not in QK_NORM) and not (s.num_experts and e[0] in DENSE_MLP)
    ]
    return rows + moe_entries(s.num_experts) if s.num_experts else rows


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
        for mc, hf_name in GLOBAL_TABLE:
            if not (mc == "output_layer.weight" and s.tie_embeddings):
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
    for mc_name, hf_name in GLOBAL_TABLE:
        if mc_name == "output_layer.weight" and s.tie_embeddings:
            continue
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
