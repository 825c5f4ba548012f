"""Demo stage: the evaluation protocol on the tiny model, before and after its short midtraining.

Checkpoints (WORKDIR/runs/): ``demo_tiny_base`` is the tiny model's step-0 initialisation — built by the
trainer's own model provider with the demo_tiny recipe's seed, i.e. exactly the weights midtraining
started from — saved as a step-0 checkpoint with the trainer's checkpoint code; ``demo_tiny`` is the
midtrained run the train stage produced. Both get the identical SFT probe (sft_probe_demo) on the demo
traces, the proxy evals (held-out loss per source on WORKDIR/shards, code retrieval on WORKDIR/prep/repos),
then the report in WORKDIR/report/. Finished steps are skipped on a rerun.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def save_initial_checkpoint(cfg, run_dir: str | Path) -> Path:  # cfg: midtrain.train.config.TrainConfig
    """Write RUN_DIR/config.yaml and the step-0 weights (RUN_DIR/checkpoints/iter_0000000) of a recipe."""
    from midtrain.train import distributed
    from midtrain.train.checkpoint import latest_checkpoint, save_checkpoint
    from midtrain.train.model import build_gpt_model

    run_dir = Path(run_dir)
    done = latest_checkpoint(run_dir)
    if done is not None:
        return done
    cfg = cfg.apply_overrides([f"run_dir={run_dir}"]).validate()
    # Same order as train(): seed the RNGs, then build, so the weights equal the run's initial weights.
    distributed.initialize(cfg.parallel.tensor, cfg.parallel.pipeline, cfg.parallel.context, seed=cfg.seed)
    try:
        model = build_gpt_model(cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg.save_yaml(run_dir / "config.yaml")
        return save_checkpoint(run_dir, 0, model, None, {"step": 0, "name": cfg.name, "initial": True}, 1)
    finally:
        distributed.destroy()
