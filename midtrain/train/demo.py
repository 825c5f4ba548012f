"""Demo stage: train demo_tiny on CPU on WORKDIR/shards into WORKDIR/runs/demo_tiny (a few minutes)."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def demo_stage(workdir: Path) -> str:
    """Train demo_tiny on WORKDIR/shards; skipped when WORKDIR/runs/demo_tiny already finished."""
    from midtrain.train.checkpoint import latest_checkpoint
    from midtrain.train.trainer import train
    from midtrain.train.command import load_config

    run_dir = Path(workdir) / "runs" / "demo_tiny"
    cfg = load_config("demo_tiny", [f"run_dir={run_dir}", f"data.path={Path(workdir) / 'shards'}"])
    done = latest_checkpoint(run_dir)
    if done is not None and done.name == f"iter_{cfg.optim.train_steps:07d}":
        log.info("demo_tiny already trained (%s); skipped", done)
        return str(run_dir)
    result = train(cfg)
    from midtrain.train import distributed

    distributed.destroy()
    if result["exit_code"] != 0:
        raise RuntimeError(f"demo_tiny stopped early at step {result['step']} (exit {result['exit_code']}); "
                           "rerun the demo to resume")
    return str(run_dir)
