"""The LR schedule of a resumed run is the one its config says, as Megatron-LM's trainer decides it: a
checkpoint trained with another schedule is refused naming the fields, unless optim.schedule_on_resume says
which schedule the resumed steps follow (an extension of the run, say)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from train_helpers import (
    destroy_process_groups,  # noqa: F401 (autouse fixture)
    metrics,
    tiny_config,
    train_in_process,
    write_shards,
)

from midtrain.config import ConfigError
from midtrain.train.config import read_run_config

MAX, MIN, WARMUP, FRACTION = 3e-3, 3e-4, 2, 0.2  # tiny_config's schedule (WSD)


def wsd_lr(step: int, train_steps: int) -> float:
    """The documented WSD schedule, written out: linear warmup, the peak, then a linear decay over the last
    round(wsd_decay_fraction * train_steps) steps down to min_lr."""
    if step <= WARMUP:
        return MAX * step / WARMUP
    decay = max(1, round(FRACTION * train_steps))
    start = train_steps - decay
    return MAX if step <= start else MIN + (1 - (step - start) / decay) * (MAX - MIN)


@pytest.fixture(scope="module")
def run8(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sched")
    shards = write_shards(tmp / "shards", sequences=24, seq_length=64)
    cfg = tiny_config(**{"data.path": str(shards)})
    train_in_process(cfg, tmp / "run")
    return cfg, tmp / "run"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_changed_schedule_is_refused_naming_the_fields_before_anything_is_written(run8, tmp_path):
    cfg, src = run8
    assert [r["lr"] for r in metrics(src)] == pytest.approx([wsd_lr(k, 8) for k in range(1, 9)], rel=1e-12)
    run_dir = _copy(src, tmp_path / "run")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    with pytest.raises(
        ConfigError,
        match=r"optim.train_steps: .*another LR schedule \(config.optim.train_steps: recorded 8, now 12\)"
        r".*optim.schedule_on_resume=config",
    ):
        train_in_process(cfg, run_dir, "optim.train_steps=12")
    with pytest.raises(
        ConfigError, match=r"optim.lr: recorded 0.003, now 0.001; config.optim.warmup_steps: recorded 2, now 1"
    ):
        train_in_process(cfg, run_dir, "optim.lr=1e-3", "optim.warmup_steps=1")
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_an_extension_follows_the_schedule_its_mode_documents(run8, tmp_path):
    cfg, src = run8
    # config: the 12-step schedule from step 8 on, as if planned at 12 (WSD: peak again, decay over 11-12)
    extended = _copy(src, tmp_path / "config")
    assert train_in_process(cfg, extended, "optim.train_steps=12", "optim.schedule_on_resume=config")["step"] == 12
    rows = metrics(extended)
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert [r["lr"] for r in rows[8:]] == pytest.approx([wsd_lr(k, 12) for k in range(9, 13)], rel=1e-12)
    assert [r["lr"] for r in rows[8:]] == pytest.approx([MAX, MAX, (MAX + MIN) / 2, MIN], rel=1e-12)
    # the checkpoint now records the 12-step schedule: a plain resume of the extended run is not refused
    assert train_in_process(cfg, extended, "optim.train_steps=12", "optim.schedule_on_resume=strict")["step"] == 12
    # checkpoint: megatron's use_checkpoint_opt_param_scheduler, past the 8-step decay: min_lr
    kept = _copy(src, tmp_path / "checkpoint")
    train_in_process(cfg, kept, "optim.train_steps=12", "optim.lr=1e-2", "optim.schedule_on_resume=checkpoint")
    assert [r["lr"] for r in metrics(kept)[8:]] == pytest.approx([MIN] * 4, rel=1e-12)
    assert read_run_config(kept / "config.yaml").optim.lr == MAX  # what the steps used, not the ignored 1e-2


def _param_group_lrs(checkpoint: Path) -> set[tuple[float, float]]:
    """(max_lr, min_lr) of every optimizer parameter group the checkpoint saved (megatron keeps them per group,
    and the scheduler computes each group's lr from its own pair)."""
    from megatron.core import dist_checkpointing

    found: set[tuple[float, float]] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "max_lr" in node and "min_lr" in node and ("params" in node or "lr" in node):
                found.add((float(node["max_lr"]), float(node["min_lr"])))
            for v in node.values():
                walk(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v)

    walk(dist_checkpointing.load_common_state_dict(str(checkpoint)))
    return found


def test_an_extension_with_schedule_on_resume_config_takes_the_new_lr_and_min_lr(run8, tmp_path):
    """A new optim.lr / min_lr on an extension: the steps from the checkpoint on follow them (megatron's
    optimizer restores each parameter group's max_lr/min_lr from the checkpoint; they must be the config's)."""
    cfg, src = run8
    new_max, new_min = 1e-3, 1e-4
    extended = _copy(src, tmp_path / "run")
    over = ["optim.train_steps=12", f"optim.lr={new_max}", f"optim.min_lr={new_min}", "optim.schedule_on_resume=config"]
    assert train_in_process(cfg, extended, *over)["step"] == 12
    rows = metrics(extended)
    assert [r["lr"] for r in rows[:8]] == pytest.approx([wsd_lr(k, 8) for k in range(1, 9)], rel=1e-12)
    # WSD at 12 steps with the new peak and floor: the peak on 9-10, decay over 11-12 down to the new min_lr
    assert [r["lr"] for r in rows[8:]] == pytest.approx([new_max, new_max, (new_max + new_min) / 2, new_min], rel=1e-12)
    assert _param_group_lrs(extended / "checkpoints" / "iter_0000012") == {(new_max, new_min)}
    assert _param_group_lrs(src / "checkpoints" / "iter_0000008") == {(MAX, MIN)}
    saved = read_run_config(extended / "config.yaml").optim
    assert (saved.lr, saved.min_lr) == (new_max, new_min)
