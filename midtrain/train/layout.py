"""Parallel layout rules: which TP/PP/CP/DP/SP/EP combinations can run, with messages naming the field.

``check_layout`` is static (called from ``TrainConfig.check``, no I/O); ``resolve_data_parallel`` adds
what only the launch knows (the world size).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from midtrain.config import ConfigError, require

if TYPE_CHECKING:
    from midtrain.train.config import TrainConfig


def check_layout(cfg: "TrainConfig") -> None:
    m, p, prec = cfg.model, cfg.parallel, cfg.precision
    tp, pp, cp = p.tensor, p.pipeline, p.context
    require(cfg.data.seq_length <= m.max_position_embeddings, "data.seq_length",
            f"{cfg.data.seq_length} exceeds model.max_position_embeddings={m.max_position_embeddings}")
    require(m.num_attention_heads % tp == 0, "parallel.tensor",
            f"num_attention_heads={m.num_attention_heads} is not divisible by tensor={tp}")
    require(m.num_query_groups % tp == 0, "parallel.tensor",
            f"num_query_groups={m.num_query_groups} (key/value heads) is not divisible by tensor={tp}")
    require(m.ffn_hidden_size % tp == 0, "parallel.tensor",
            f"ffn_hidden_size={m.ffn_hidden_size} is not divisible by tensor={tp}")
    require(m.vocab_size % tp == 0, "parallel.tensor",
            f"vocab_size={m.vocab_size} is not divisible by tensor={tp}")
    require(m.num_layers % pp == 0, "parallel.pipeline",
            f"num_layers={m.num_layers} is not divisible by pipeline={pp}")
    if cp > 1:
        require(prec.transformer_impl != "local", "parallel.context",
                f"context={cp} needs Transformer Engine (THD + context parallel attention); "
                "precision.transformer_impl=local has no context parallelism")
        require(cfg.data.seq_length % (2 * cp) == 0, "data.seq_length",
                f"{cfg.data.seq_length} is not divisible by 2*context={2 * cp} (load-balanced CP splits each "
                "sequence into 2*CP chunks)")
    if p.sequence_parallel:
        require(prec.transformer_impl != "local", "parallel.sequence_parallel",
                "sequence parallelism needs Transformer Engine norms (the local spec's torch norms fail)")
        mult = 2 * cp * tp if cp > 1 else tp
        require(cfg.data.seq_length % mult == 0, "data.seq_length",
                f"{cfg.data.seq_length} is not divisible by {mult} (sequence parallel splits the sequence over "
                f"tensor={tp}" + (f" after context={cp}" if cp > 1 else "") + ")")
    if prec.fp8 != "none":
        n_bf16 = prec.fp8_bf16_first_layers + prec.fp8_bf16_last_layers
        require(n_bf16 < m.num_layers or prec.fp8_recipe == "delayed", "precision.fp8_bf16_first_layers",
                f"{n_bf16} BF16 layers leave no FP8 layer out of num_layers={m.num_layers}")
        per_stage = m.num_layers // pp
        require(prec.fp8_bf16_first_layers <= per_stage and prec.fp8_bf16_last_layers <= per_stage,
                "precision.fp8_bf16_first_layers", f"at most {per_stage} (layers per pipeline stage)")
    if p.data is not None:
        require(cfg.optim.global_batch_size % p.data == 0, "optim.global_batch_size",
                f"{cfg.optim.global_batch_size} is not divisible by parallel.data={p.data}")
    check_expert_layout(cfg)


def expert_tensor(cfg: "TrainConfig") -> int:
    p = cfg.parallel
    return p.tensor if p.expert_tensor is None else p.expert_tensor


def check_expert_layout(cfg: "TrainConfig") -> None:
    """Expert parallelism (EP) and expert-tensor parallelism (ETP) against the model and the dense layout.

    megatron-core folds the expert layout into the dense one: within a pipeline stage the
    tensor x context x data ranks are regrouped as expert_tensor x expert x expert-data, so EP x ETP must
    divide TP x CP x DP (the world size per pipeline stage).
    """
    m, p = cfg.model, cfg.parallel
    ep, etp = p.expert, expert_tensor(cfg)
    if not m.is_moe:
        require(ep == 1, "parallel.expert", f"expert={ep} needs a mixture-of-experts model (model.num_experts)")
        require(p.expert_tensor in (None, p.tensor), "parallel.expert_tensor",
                "needs a mixture-of-experts model (model.num_experts)")
        return
    require(m.num_experts % ep == 0, "parallel.expert",
            f"model.num_experts={m.num_experts} is not divisible by expert={ep}")
    require(m.moe_ffn_hidden_size % etp == 0, "parallel.expert_tensor",
            f"model.moe_ffn_hidden_size={m.moe_ffn_hidden_size} is not divisible by expert_tensor={etp}")
    if m.moe_shared_expert_ffn_hidden_size:
        require(m.moe_shared_expert_ffn_hidden_size % p.tensor == 0, "parallel.tensor",
                f"model.moe_shared_expert_ffn_hidden_size={m.moe_shared_expert_ffn_hidden_size} is not "
                f"divisible by tensor={p.tensor}")
    require(p.tensor == 1 or p.sequence_parallel, "parallel.sequence_parallel",
            f"MoE layers with tensor={p.tensor} need sequence_parallel=true (megatron-core refuses to train "
            "them otherwise)")
    if p.data is not None:
        per_stage = p.tensor * p.context * p.data
        require(per_stage % (ep * etp) == 0, "parallel.expert",
                f"expert={ep} x expert_tensor={etp} = {ep * etp} does not divide tensor x context x data = "
                f"{p.tensor} x {p.context} x {p.data} = {per_stage} (the ranks of one pipeline stage)")


def resolve_data_parallel(cfg: "TrainConfig", world_size: int) -> int:
    """The data-parallel size for this world; raises ConfigError when the layout does not fit it."""
    mp = cfg.parallel.model_parallel_size
    if world_size % mp:
        raise ConfigError(f"parallel: tensor*pipeline*context={mp} does not divide the world size {world_size}")
    dp = world_size // mp
    if cfg.parallel.data is not None and cfg.parallel.data != dp:
        raise ConfigError(f"parallel.data: {cfg.parallel.data} but world_size {world_size} / "
                          f"(tensor*pipeline*context={mp}) = {dp}")
    if cfg.optim.global_batch_size % dp:
        raise ConfigError(f"optim.global_batch_size: {cfg.optim.global_batch_size} is not divisible by the "
                          f"data-parallel size {dp}")
    ep, etp = cfg.parallel.expert, expert_tensor(cfg)
    if world_size % (ep * etp * cfg.parallel.pipeline):
        raise ConfigError(f"parallel.expert: expert={ep} x expert_tensor={etp} x pipeline={cfg.parallel.pipeline} "
                          f"does not divide the world size {world_size}")
    return dp
