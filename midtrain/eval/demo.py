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


def demo_protocol(workdir: Path):  # -> ProtocolConfig
    """protocol_demo pointed at WORKDIR's checkpoints, data and report directory."""
    from midtrain.eval.protocol import ProtocolConfig
    from recipes import resolve_config

    w = Path(workdir)
    cfg = resolve_config("protocol_demo", ProtocolConfig, "protocol", validate=False)
    cfg.output = str(w / "runs" / "protocol")
    cfg.checkpoints = {"base": str(w / "runs" / "demo_tiny_base"), "midtrained": str(w / "runs" / "demo_tiny")}
    cfg.report_dir = str(w / "report")
    cfg.proxy.shards = str(w / "shards")
    cfg.proxy.retrieval.repos = str(w / "prep" / "repos")
    cfg.sft_overrides = [f"traces=[{w / 'prep' / 'traces'}]"]
    from midtrain.train.checkpoint import latest_checkpoint

    done = latest_checkpoint(w / "runs" / "demo_tiny")
    steps = int(done.name.split("_")[-1]) if done is not None else "its"
    cfg.notes["midtrained"] = f"demo_tiny after {steps} midtraining steps on the demo shards"
    return cfg.validate()


def demo_stage(workdir: Path) -> str:
    """SFT probe + proxy evals of the base and midtrained tiny checkpoints, then WORKDIR/report/report.md."""
    from midtrain.eval.protocol import run_protocol
    from midtrain.train.checkpoint import latest_checkpoint
    from midtrain.train.command import load_config

    w = Path(workdir)
    midtrained = w / "runs" / "demo_tiny"
    if latest_checkpoint(midtrained) is None:
        raise FileNotFoundError(f"{midtrained}: no midtrained checkpoint; run the train stage first "
                                "(`midtrain demo --only train`)")
    # The recipe as the train stage ran it (same seed), so step 0 here is that run's starting point.
    base_cfg = load_config("demo_tiny", [f"data.path={w / 'shards'}"])
    log.info("base checkpoint: step-0 initialisation of demo_tiny -> %s",
             save_initial_checkpoint(base_cfg, w / "runs" / "demo_tiny_base"))
    cfg = demo_protocol(w)
    rc = run_protocol(cfg)
    report = Path(cfg.report_dir) / "report.md"
    if rc != 0 or not report.exists():
        raise RuntimeError(f"protocol stage failed (exit {rc}); see the log above and {cfg.output}")
    return str(report)
