"""A recipe's step-0 checkpoint: the weights a training run of that recipe starts from, saved without training.

A base to compare a midtrained run against (the demo's and the sweeps' "before" checkpoint).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from midtrain.train.config import TrainConfig


def save_initial_checkpoint(cfg: TrainConfig, run_dir: str | Path) -> Path:
    """Write RUN_DIR/config.yaml and the step-0 weights (RUN_DIR/checkpoints/iter_0000000) of a recipe."""
    # lazy: loads megatron, torch only when this runs
    from midtrain.train import distributed
    from midtrain.train.checkpoint import latest_checkpoint, model_shape, save_checkpoint
    from midtrain.train.model import build_gpt_model

    run_dir = Path(run_dir)
    done = latest_checkpoint(run_dir)
    if done is not None:
        return done
    cfg = cfg.replace(run_dir=run_dir).validate()
    # Same order as train(): seed the RNGs, then build, so the weights equal the run's initial weights.
    distributed.initialize(cfg.parallel.tensor, cfg.parallel.pipeline, cfg.parallel.context, seed=cfg.seed)
    try:
        model = build_gpt_model(cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg.save_yaml(run_dir / "config.yaml")
        return save_checkpoint(
            run_dir,
            0,
            model,
            None,
            {"step": 0, "name": cfg.name, "initial": True, "model_shape": model_shape(cfg.model)},
            1,
        )
    finally:
        distributed.destroy()
