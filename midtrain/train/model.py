"""Model provider: a recipe's ModelConfig -> megatron-core TransformerConfig + GPTModel.

Llama-3 / Qwen3 dense shapes (RMSNorm, SwiGLU, GQA, RoPE, Qwen3 QK-norm, tied or untied embeddings).
Layer spec: Transformer Engine's when TE imports on a GPU (FP8 possible, THD attention with cu_seqlens),
otherwise the local spec with :class:`PortableDocumentAttention` as core attention. Both take the packed
sequence the same way (THD, micro-batch 1, ``PackedSeqParams``), so the data path is one.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_config import TransformerConfig

from midtrain.config import ConfigError
from midtrain.train import hf_rope, moe
from midtrain.train.attention import BACKEND_ATTR, PortableDocumentAttention
from midtrain.train.config import TrainConfig
from midtrain.train.gpu_choices import (
    apex_wgrad_available,
    choose_impl,
    fusion_flags,
    installed_te_version,
    jit_fusions_work,
    selective_recompute_modules,
    te_version_problem,
)

log = logging.getLogger(__name__)


@functools.cache
def te_available() -> bool:
    """True when Transformer Engine imports (it needs CUDA; never imported on a CPU-only machine)."""
    if not torch.cuda.is_available():
        return False
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "no TE"
        return False
    return True


def resolve_impl(cfg: TrainConfig) -> str:
    """'transformer_engine' or 'local' for this machine; raises ConfigError when the recipe needs TE."""
    impl = choose_impl(cfg.precision.transformer_impl, te_available(), cfg.precision.dtype)
    if impl == "transformer_engine":
        problem = te_version_problem(cfg.precision.fp8, cfg.precision.fp8_recipe, installed_te_version())
        if problem:
            raise ConfigError(problem)
    if impl == "local":
        needs_te = {
            "parallel.context": cfg.parallel.context > 1,
            "precision.fp8": cfg.precision.fp8 != "none",
            "parallel.sequence_parallel": cfg.parallel.sequence_parallel,
        }
        for field, needed in needs_te.items():
            if needed:
                why = (
                    "which is not available on this machine"
                    if not te_available()
                    else f"which transformer_impl={cfg.precision.transformer_impl} with dtype="
                    f"{cfg.precision.dtype} does not use (TE layers train in bf16)"
                )
                raise ConfigError(f"{field}: needs Transformer Engine, {why}")
    if cfg.precision.fp8_recipe == "mxfp8" and cfg.precision.fp8 != "none" and torch.cuda.is_available():
        major, _ = torch.cuda.get_device_capability()
        if major < 10:
            raise ConfigError(
                f"precision.fp8_recipe: mxfp8 needs a Blackwell GPU (compute capability >= 10), "
                f"this one is {major}.x; use tensorwise or blockwise"
            )
    return impl


def _rope_extra(cfg: TrainConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """(GPTModel kwargs, TransformerConfig attributes) for RoPE, from the RoPE table in midtrain.train.hf_rope."""
    return hf_rope.gpt_model_kwargs(cfg.model), hf_rope.transformer_config_attrs(cfg.model)


def build_transformer_config(cfg: TrainConfig, impl: str | None = None, on_cpu: bool = False) -> TransformerConfig:
    """The megatron-core TransformerConfig for a recipe (pure translation; no model is built).

    on_cpu: build for the CPU even where CUDA is available (checkpoint conversion runs in one CPU process).
    """
    m, p, prec = cfg.model, cfg.parallel, cfg.precision
    gpu = torch.cuda.is_available() and not on_cpu
    impl = impl or resolve_impl(cfg)
    bf16 = prec.dtype == "bf16"
    kwargs: dict[str, Any] = dict(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        ffn_hidden_size=m.ffn_hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups,
        kv_channels=m.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=m.norm_epsilon,
        gated_linear_unit=True,  # SwiGLU
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        qk_layernorm=m.qk_layernorm,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=m.init_method_std,
        # parallelism
        tensor_model_parallel_size=p.tensor,
        pipeline_model_parallel_size=p.pipeline,
        context_parallel_size=p.context,
        sequence_parallel=p.sequence_parallel,
        # numerics
        bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        pipeline_dtype=torch.bfloat16 if bf16 else torch.float32,
        # loss averaged per token over the global batch (the schedule sums, finalize divides)
        calculate_per_token_loss=True,
        # fused kernels where this machine has them (all off on CPU); see gpu_choices.fusion_flags
        **fusion_flags(impl, gpu, m.rope_scaling, apex_wgrad_available(), jit_ok=gpu and jit_fusions_work()),
        use_cpu_initialization=not gpu,
        transformer_impl="transformer_engine" if impl == "transformer_engine" else "local",
    )
    if p.context > 1:
        kwargs["cp_comm_type"] = "p2p"
    if p.recompute == "full":
        kwargs.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    elif p.recompute == "selective":
        kwargs.update(
            recompute_granularity="selective",
            recompute_modules=selective_recompute_modules(
                impl, m.is_moe, moe.grouped_gemm(cfg, impl), prec.fp8 != "none" and prec.fp8_recipe == "delayed"
            ),
        )
    if prec.fp8 != "none":
        kwargs.update(
            fp8=prec.fp8,
            fp8_recipe=prec.fp8_recipe,
            fp8_amax_history_len=prec.fp8_amax_history_len if prec.fp8_recipe == "delayed" else 1,
            fp8_amax_compute_algo="max" if prec.fp8_recipe == "delayed" else "most_recent",
        )
        if prec.fp8_bf16_first_layers or prec.fp8_bf16_last_layers:
            kwargs.update(
                first_last_layers_bf16=True,
                num_layers_at_start_in_bf16=prec.fp8_bf16_first_layers,
                num_layers_at_end_in_bf16=prec.fp8_bf16_last_layers,
            )
    kwargs.update(moe.transformer_config_kwargs(cfg, impl))
    _, attrs = _rope_extra(cfg)
    tc = TransformerConfig(**kwargs)
    for key, value in attrs.items():
        setattr(tc, key, value)
    setattr(tc, BACKEND_ATTR, prec.portable_attention)  # read by PortableDocumentAttention
    return tc


def build_layer_spec(cfg: TrainConfig, impl: str) -> ModuleSpec:
    if cfg.model.is_moe:
        spec = moe.layer_spec(cfg, impl)
        if impl != "transformer_engine":
            spec.submodules.self_attention.submodules.core_attention = PortableDocumentAttention
        return spec
    if impl == "transformer_engine":
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec

        return get_gpt_layer_with_transformer_engine_spec(qk_layernorm=cfg.model.qk_layernorm)
    spec = get_gpt_layer_local_spec(qk_layernorm=cfg.model.qk_layernorm, normalization="RMSNorm")
    # The local DotProductAttention ignores document boundaries; ours runs attention per document.
    spec.submodules.self_attention.submodules.core_attention = PortableDocumentAttention
    return spec


def build_gpt_model(
    cfg: TrainConfig, pre_process: bool | None = None, post_process: bool | None = None, on_cpu: bool = False
) -> GPTModel:
    """Build this rank's GPTModel for a recipe (parallel_state must be initialised).

    pre_process/post_process default to this rank's pipeline position; on_cpu keeps the model on the CPU
    even on a GPU machine (conversion, which also builds under the meta device).
    """
    from megatron.core import parallel_state

    impl = resolve_impl(cfg)
    tc = build_transformer_config(cfg, impl, on_cpu=on_cpu)
    if pre_process is None:
        pre_process = parallel_state.is_pipeline_first_stage(ignore_virtual=True)
    if post_process is None:
        post_process = parallel_state.is_pipeline_last_stage(ignore_virtual=True)
    rope_kwargs, _ = _rope_extra(cfg)
    model = GPTModel(
        config=tc,
        transformer_layer_spec=build_layer_spec(cfg, impl),
        vocab_size=cfg.model.vocab_size,
        max_sequence_length=cfg.model.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        share_embeddings_and_output_weights=cfg.model.tie_embeddings,
        parallel_output=True,
        **rope_kwargs,
    )
    if torch.cuda.is_available() and not on_cpu:
        model.cuda(torch.cuda.current_device())
    log.debug("built GPTModel (%s spec): %d parameters on this rank", impl, sum(p.numel() for p in model.parameters()))
    return model


def count_parameters(cfg: TrainConfig) -> dict[str, int]:
    """Parameter counts of the full (unsharded) model: total and non-embedding."""
    pc = cfg.model.param_count()
    return {"total": pc.total, "non_embedding": pc.non_embedding, "embedding": pc.embedding}


@contextlib.contextmanager
def output_rows(model: GPTModel, rows: torch.Tensor | None) -> Iterator[None]:
    """Within the block, the model's output layer computes logits only for these sequence rows.

    Scoring needs logits at a few positions of a long sequence; the full [s, vocab] output would dominate
    memory. A forward pre-hook (PyTorch's public hook) selects the rows of the output layer's input
    ``[s, b, h]``; it is removed on exit. ``rows=None`` changes nothing.
    """
    if rows is None:
        yield
        return

    def select(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return (args[0][rows], *args[1:]), kwargs

    handle = model.output_layer.register_forward_pre_hook(select, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
