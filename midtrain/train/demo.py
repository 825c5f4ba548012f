"""Demo stage: train demo_tiny on CPU on WORKDIR/shards into WORKDIR/runs/demo_tiny (a few minutes)."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def build_demo_shards(shard_dir: str | Path) -> None:
    """Build the demo's shards at ``shard_dir`` (= WORKDIR/shards) from the embedded demo inputs."""
    workdir = Path(shard_dir).parent
    for stage in ("midtrain.sources.demo", "midtrain.pack.demo"):
        try:
            module = importlib.import_module(stage)
        except ModuleNotFoundError as e:
            if e.name != stage:
                raise
            raise FileNotFoundError(f"data.path: {shard_dir} has no shards and {stage} (which builds them from "
                                    "the demo inputs) is not available; run `midtrain pack` first") from None
        log.info("building demo shards: %s.demo_stage(%s)", stage, workdir)
        module.demo_stage(workdir)
    if not (Path(shard_dir) / "manifest.json").exists():
        raise FileNotFoundError(f"data.path: the demo stages ran but wrote no shards at {shard_dir}")


def demo_stage(workdir: Path) -> str:
    """Train demo_tiny on WORKDIR/shards; skipped when WORKDIR/runs/demo_tiny already finished."""
    from midtrain.train.checkpoint import latest_checkpoint
    from midtrain.train.trainer import train
    from recipes import get_recipe

    run_dir = Path(workdir) / "runs" / "demo_tiny"
    cfg = get_recipe("demo_tiny").build([f"run_dir={run_dir}", f"data.path={Path(workdir) / 'shards'}"])
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
