"""Qwen3 (``model.family=qwen3``): dense ``Qwen3ForCausalLM`` and its mixture of experts, ``Qwen3MoeForCausalLM``
(every layer an MoE layer, no shared expert, softmax top-k routing)."""

from __future__ import annotations

from typing import Any

from midtrain.config import ConfigError
from midtrain.train.families.llama_layout import GLOBAL_ROWS, LAYER_ROWS
from midtrain.train.families.spec import HFArch, ModelFamily, MoeLayout, Row


def moe_rows(num_experts: int) -> list[Row]:
    """The MLP rows of a Qwen3-MoE layer: router (HF ``mlp.gate``), then fc1 = [gate; up] and fc2 = down per
    expert (HF ``mlp.experts.E.*``, the released checkpoints' layout; megatron's local spec numbers experts
    ``mlp.experts.local_experts.E``, per expert-parallel rank)."""
    rows: list[Row] = [("mlp.router.weight", ("mlp.gate.weight",), "copy")]
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


def moe_fields_from_hf(hf: dict[str, Any], where: str) -> dict[str, Any]:
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


def moe_hf_fields(m: Any) -> dict[str, Any]:
    """The Qwen3-MoE config.json keys for ModelConfig ``m``."""
    return dict(
        num_experts=m.num_experts,
        moe_intermediate_size=m.moe_ffn_hidden_size,
        num_experts_per_tok=m.moe_router_topk,
        norm_topk_prob=m.moe_router_topk_norm,
        router_aux_loss_coef=m.moe_aux_loss_coeff,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    )


QWEN3 = ModelFamily(
    name="qwen3",
    hf=HFArch("qwen3", "Qwen3ForCausalLM"),
    layer_rows=LAYER_ROWS,
    global_rows=GLOBAL_ROWS,
    qk_layernorm=True,
    hf_fixed={"use_sliding_window": False},
    moe=MoeLayout(
        name="Qwen3-MoE",
        hf=HFArch("qwen3_moe", "Qwen3MoeForCausalLM"),
        rows=moe_rows,
        fields_from_hf=moe_fields_from_hf,
        hf_fields=moe_hf_fields,
    ),
    default_tokenizer=True,  # midtrain.formats.tokenizer builds Qwen3's tokenizer and chat template offline
)
