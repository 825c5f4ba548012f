"""Mixture of experts: a recipe's MoE fields -> megatron-core's MoE layer, and its router metrics.

The shape is Qwen3-MoE's: every decoder layer's MLP is a router (top-k of ``num_experts``, softmax or
sigmoid scores) over SwiGLU experts of width ``moe_ffn_hidden_size``, optionally beside an always-on
shared expert. Training is dropless by default (no capacity factor: every token reaches its top-k experts)
with the load-balancing auxiliary loss added to the language-model loss; both are megatron-core's own
(``megatron.core.transformer.moe``), this module only translates the recipe and reads the router's logs.

Layer specs: Transformer Engine's with grouped GEMM experts on GPUs (``moe_grouped_gemm``), else the local
spec with one plain MLP per expert (``SequentialMLP``), which is what runs on CPU. Tokens reach the
experts with the all-to-all dispatcher on GPUs and the all-gather one on CPU (all-to-all needs CUDA
streams); both give the same results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from midtrain.train.cpu_mode import moe_router_without_te
from midtrain.train.gpu_choices import installed_te_version, moe_permute_fusion

if TYPE_CHECKING:
    from megatron.core.transformer.spec_utils import ModuleSpec

    from midtrain.train.config import TrainConfig

# The router's per-layer logging names in megatron-core's tracker -> our metric names.
_TRACKED = {
    "load_balancing_loss": "moe_load_balancing_loss",
    "seq_load_balancing_loss": "moe_load_balancing_loss",
    "global_load_balancing_loss": "moe_load_balancing_loss",
    "z_loss": "moe_z_loss",
}


def token_dispatcher() -> str:
    """All-to-all on GPUs; all-gather on CPU (megatron's all-to-all dispatcher creates CUDA streams)."""
    return "alltoall" if torch.cuda.is_available() else "allgather"


def grouped_gemm(cfg: TrainConfig, impl: str) -> bool:
    """Grouped GEMM experts where available: Transformer Engine's grouped linear layers."""
    return bool(cfg.model.moe_grouped_gemm) and impl == "transformer_engine"


def transformer_config_kwargs(cfg: TrainConfig, impl: str) -> dict[str, Any]:
    """The TransformerConfig fields of the MoE layer ({} for a dense model)."""
    m = cfg.model
    if not m.is_moe:
        return {}
    kwargs: dict[str, Any] = dict(
        num_moe_experts=m.num_experts,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_router_topk=m.moe_router_topk,
        moe_router_score_function=m.moe_router_score_function,
        # softmax: top-k of the logits then softmax over those k = renormalised top-k probabilities;
        # softmax over all experts first = raw probabilities (HF norm_topk_prob=false)
        moe_router_pre_softmax=m.moe_router_score_function == "softmax" and not m.moe_router_topk_norm,
        moe_router_load_balancing_type=m.moe_load_balancing,
        moe_aux_loss_coeff=m.moe_aux_loss_coeff if m.moe_load_balancing != "none" else 0.0,
        moe_z_loss_coeff=m.moe_z_loss_coeff,
        moe_router_dtype="fp32",  # routing decisions in fp32 (bf16 logits flip near-ties)
        moe_token_dispatcher_type=token_dispatcher(),
        moe_grouped_gemm=grouped_gemm(cfg, impl),
        moe_permute_fusion=moe_permute_fusion(impl, torch.cuda.is_available(), installed_te_version()),
        expert_model_parallel_size=cfg.parallel.expert,
        expert_tensor_parallel_size=cfg.parallel.expert_tensor_size,
    )
    if m.moe_capacity_factor is not None:
        kwargs.update(
            moe_expert_capacity_factor=m.moe_capacity_factor,
            moe_token_drop_policy="probs",
            moe_pad_expert_input_to_capacity=False,
        )
    if m.moe_shared_expert_ffn_hidden_size:
        kwargs.update(
            moe_shared_expert_intermediate_size=m.moe_shared_expert_ffn_hidden_size, moe_shared_expert_overlap=False
        )
    return kwargs


def layer_spec(cfg: TrainConfig, impl: str) -> ModuleSpec:
    """The decoder layer spec with an MoE MLP: TE's (grouped GEMM experts) or the local one."""
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_layer_local_spec,
        get_gpt_layer_with_transformer_engine_spec,
    )

    moe_router_without_te()
    m = cfg.model
    grouped = grouped_gemm(cfg, impl)
    if impl == "transformer_engine":
        return get_gpt_layer_with_transformer_engine_spec(
            num_experts=m.num_experts, moe_grouped_gemm=grouped, qk_layernorm=m.qk_layernorm
        )
    return get_gpt_layer_local_spec(
        num_experts=m.num_experts, moe_grouped_gemm=grouped, qk_layernorm=m.qk_layernorm, normalization="RMSNorm"
    )


# -- router metrics for the step log ----------------------------------------------------------------------


def reset_router_log() -> None:
    """Forget what earlier models in this process logged (the tracker is a module-level dict)."""
    from megatron.core.transformer.moe.moe_utils import get_moe_layer_wise_logging_tracker

    get_moe_layer_wise_logging_tracker().clear()


def step_router_metrics(cfg: TrainConfig, num_microbatches: int) -> dict[str, float]:
    """This step's router losses, averaged over MoE layers, micro-batches and data-parallel ranks.

    ``moe_load_balancing_loss`` is the balancing loss itself (1.0 = perfectly balanced for the standard
    aux loss); ``moe_aux_loss`` is what was added to the training loss (x moe_aux_loss_coeff). Collective:
    every rank calls it after the forward-backward pass. Clears the tracker for the next step.
    """
    if not cfg.model.is_moe:
        return {}
    from megatron.core.transformer.moe.moe_utils import (
        clear_aux_losses_tracker,
        get_moe_layer_wise_logging_tracker,
        reduce_aux_losses_tracker_across_ranks,
    )

    tracker = get_moe_layer_wise_logging_tracker()
    names = sorted(n for n in tracker if n in _TRACKED)
    if not names:
        return {}
    reduce_aux_losses_tracker_across_ranks(names)
    out: dict[str, float] = {}
    for name in names:
        value = float(tracker[name]["values"].sum()) / cfg.model.num_layers / max(1, num_microbatches)
        out[_TRACKED[name]] = value
    if "moe_load_balancing_loss" in out:
        out["moe_aux_loss"] = out["moe_load_balancing_loss"] * cfg.model.moe_aux_loss_coeff
    clear_aux_losses_tracker()
    return out


def clip_grad_norm(optimizer: Any, max_norm: float) -> float:
    """Global gradient norm, clipping to ``max_norm``, for a plain or a chained optimizer.

    With expert parallelism megatron-core builds one optimizer for the dense parameters and one for the
    experts (a ``ChainedOptimizer``), whose ``clip_grad_norm`` only works with a single member: take the
    norm over both (as its ``step`` does) and clip each member's parameters by it.
    """
    members = getattr(optimizer, "chained_optimizers", None)
    if not members or len(members) == 1:
        return optimizer.clip_grad_norm(max_norm)
    from megatron.core.optimizer import clip_grads  # looked up at call time: CPU mode replaces the clipper

    total = optimizer.get_grad_norm()
    for member in members:
        params = member.get_parameters()
        if params and not getattr(member, "is_stub_optimizer", False):
            clip_grads.clip_grad_by_total_norm_fp32(params, max_norm, total)
    return total
