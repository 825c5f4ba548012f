"""The parallel layout against the world size, which only the launch knows (the static rules are in
``TrainConfig.check``, midtrain/train/config.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from midtrain.config import ConfigError

if TYPE_CHECKING:
    from midtrain.train.config import TrainConfig


def resolve_data_parallel(cfg: TrainConfig, world_size: int) -> int:
    """The data-parallel size for this world; raises ConfigError when the layout does not fit it."""
    mp = cfg.parallel.model_parallel_size
    if world_size % mp:
        raise ConfigError(f"parallel: tensor*pipeline*context={mp} does not divide the world size {world_size}")
    dp = world_size // mp
    if cfg.parallel.data is not None and cfg.parallel.data != dp:
        raise ConfigError(
            f"parallel.data: {cfg.parallel.data} but world_size {world_size} / (tensor*pipeline*context={mp}) = {dp}"
        )
    if cfg.optim.global_batch_size % dp:
        raise ConfigError(
            f"optim.global_batch_size: {cfg.optim.global_batch_size} is not divisible by the data-parallel size {dp}"
        )
    ep, etp = cfg.parallel.expert, cfg.parallel.expert_tensor_size
    if world_size % (ep * etp * cfg.parallel.pipeline):
        raise ConfigError(
            f"parallel.expert: expert={ep} x expert_tensor={etp} x pipeline={cfg.parallel.pipeline} "
            f"does not divide the world size {world_size}"
        )
    return dp
