"""A training that already ran: reused only for the settings it ran with (the demo's train stage trains a changed
recipe again from scratch), and resumed only after the pre-check looked at the checkpoint the resume loads."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from train_helpers import (
    destroy_process_groups,  # noqa: F401 (autouse fixture)
    metrics,
    tiny_config,
    write_shards,
)

from midtrain.config import ConfigError
from midtrain.train import distributed


def test_the_demo_train_stage_trains_a_changed_recipe_again_from_scratch(tmp_path, caplog):
    """End to end through the demo's train stage (a config.yaml as its recipe): a rerun reuses the finished run;
    a recipe with another lr is not reused (the same last step) nor resumed, but trained again, the field logged."""
    from midtrain.demo.stages import train_stage
    from midtrain.train.config import read_run_config

    work = tmp_path / "demo"
    write_shards(work / "shards", sequences=8, seq_length=64)
    recipe, changed = tmp_path / "tiny.yaml", tmp_path / "tiny_lr.yaml"
    steps = {"optim.train_steps": 2, "optim.warmup_steps": 1, "checkpoint.save_interval": 2}
    tiny_config(**steps).save_yaml(recipe)
    tiny_config(**steps, **{"optim.lr": 1e-2}).save_yaml(changed)
    run = Path(train_stage(work, str(recipe)))
    first = metrics(run)
    assert [r["step"] for r in first] == [1, 2]
    from midtrain.formats.stamp import shards_id

    inputs = json.loads((run / "run_info.json").read_text())["inputs"]  # the trainer's record of what it read
    assert inputs == {"data": shards_id(work / "shards"), "init_from": None}
    with caplog.at_level(logging.INFO):
        train_stage(work, str(recipe))
        assert "demo_tiny already trained" in caplog.text and metrics(run) == first
        caplog.clear()
        train_stage(work, str(changed))
    assert "holds another training (config.optim.lr: recorded 0.003, now 0.01); trained again" in caplog.text
    again = metrics(run)
    assert [r["step"] for r in again] == [1, 2] and again[0]["loss"] == first[0]["loss"]  # from step 0, same init
    assert again[1]["loss"] != first[1]["loss"] and read_run_config(run / "config.yaml").optim.lr == 1e-2


def _flip(ckpt: Path) -> None:
    """Bytes of the largest tensor file inverted, its size unchanged: only the SHA-256 check sees it."""
    victim = max(ckpt.glob("*.distcp"), key=lambda f: f.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[512:576] = bytes(b ^ 0xFF for b in data[512:576])
    victim.write_bytes(bytes(data))


def test_the_resume_pre_check_looks_at_the_checkpoint_the_resume_loads(tmp_path):
    """iter_4 was written under lr 3e-3 (a resume with schedule_on_resume=config), iter_2 under 1e-3. With iter_4's
    content damaged the resume falls back to iter_2: the pre-check refuses that one's schedule (before, it passed on
    iter_4's and the steps went on under a schedule nobody checked). Checkpoints that agree need no hashing."""
    from midtrain.train.checkpoint import model_shape, save_checkpoint
    from midtrain.train.model import build_gpt_model
    from midtrain.train.resume import check_resumable, schedule_of

    cfg = tiny_config(**{"optim.train_steps": 4})
    distributed.initialize(seed=cfg.seed)
    model = build_gpt_model(cfg)
    for name, lrs in (("mixed", (1e-3, 3e-3)), ("same", (3e-3, 3e-3))):
        for step, lr in zip((2, 4), lrs):
            common = {"step": step, "scheduler": {}, "model_shape": model_shape(cfg.model)}
            common["schedule"] = schedule_of(cfg.apply_overrides([f"optim.lr={lr}"]))
            save_checkpoint(tmp_path / name, step, model, None, common, keep_last=2)
    distributed.destroy()
    now = cfg.apply_overrides(["optim.lr=3e-3"])
    # iter_4 is whole: it loads, and has this schedule; the verdict depended on it, so it was hashed here and the
    # load is handed it (load_checkpoint(verified=...)) instead of hashing it again
    assert check_resumable(now, tmp_path / "mixed") == tmp_path / "mixed" / "checkpoints" / "iter_0000004"
    for name in ("mixed", "same"):
        _flip(tmp_path / name / "checkpoints" / "iter_0000004")
    with pytest.raises(
        ConfigError, match=r"optim.lr: checkpoint .*mixed/checkpoints/iter_0000002 was trained with another LR schedule"
    ):
        check_resumable(now, tmp_path / "mixed")
    assert check_resumable(now, tmp_path / "same") is None  # whichever loads has this schedule: nothing hashed


def test_a_resume_on_shards_packed_again_in_place_is_refused(tmp_path):
    """run_info.json records the shards' content id; a resume on other shards at the same data.path is refused
    before anything is written, naming inputs.data (the sequence count alone did not change: written again with
    another seed). A run_info.json of an older midtrain records none: it is kept unknown, never the current ids."""
    import json

    from midtrain.train.checkpoint import model_shape, save_checkpoint
    from midtrain.train.model import build_gpt_model
    from midtrain.train.resume import check_resumable, run_inputs, schedule_of
    from midtrain.train.run_stamp import input_ids

    shards, run = write_shards(tmp_path / "shards", sequences=8, seq_length=64), tmp_path / "run"
    cfg = tiny_config(**{"data.path": str(shards), "run_dir": str(run), "optim.train_steps": 4})
    assert run_inputs(cfg, run) == input_ids(cfg) and input_ids(cfg)["init_from"] is None  # a fresh run: now's
    distributed.initialize(seed=cfg.seed)
    common = {"step": 2, "scheduler": {}, "model_shape": model_shape(cfg.model), "schedule": schedule_of(cfg)}
    save_checkpoint(run, 2, build_gpt_model(cfg), None, common, keep_last=2)
    distributed.destroy()
    cfg.save_yaml(run / "config.yaml")
    (run / "run_info.json").write_text(json.dumps({"inputs": input_ids(cfg)}))
    assert run_inputs(cfg, run) == input_ids(cfg)  # resumed: what its first start recorded
    assert check_resumable(cfg, run) is None  # the same shards: resumed
    write_shards(shards, sequences=8, seq_length=64, seed=1)  # packed again in place
    with pytest.raises(
        ConfigError, match=r"data.path: .*run trained on other shards than those .*\(inputs.data: recorded"
    ):
        check_resumable(cfg, run)
    (run / "run_info.json").write_text(json.dumps({"name": "old"}))
    assert run_inputs(cfg, run) is None
