"""Parallel layout rules: which TP/PP/CP/DP/SP combinations can run, with messages naming the field.

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
    return dp
