"""Progress on long work: prep says what each input gave, training lines carry an ETA and say where logs go."""

from __future__ import annotations

import logging

from sources_fixtures import SAMPLES, make_repo
from train_helpers import tiny_config

from midtrain.cli import main
from midtrain.train.logger import RunLogger, _duration


def test_prep_reports_each_input_with_its_counts(tmp_path, caplog):
    good = make_repo(tmp_path / "good", {"a.py": "x = 1\n"})
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with caplog.at_level(logging.INFO, logger="midtrain.sources"):
        main(
            [
                "prep",
                "repos",
                "--input",
                str(SAMPLES / "repo"),
                str(good),
                str(empty),
                "--output",
                str(tmp_path / "out"),
                "dedup.enabled=false",
            ]
        )
    lines = [r.getMessage() for r in caplog.records if r.name == "midtrain.sources" and ": input " in r.getMessage()]
    assert len(lines) == 3, lines
    assert any(f"/3 {good}: 1 documents, 0 errors" in line for line in lines)
    assert any(f"/3 {empty}: 0 documents, 1 errors" in line for line in lines)


def _record(step: int) -> dict:
    return {"step": step, "loss": 2.0, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 100.0}


def test_training_lines_have_an_eta_and_first_lines_name_the_tensorboard_dir(tmp_path, caplog, monkeypatch):
    cfg = tiny_config(**{"optim.train_steps": 10, "log.tensorboard": True, "log.interval": 1})
    clock = iter([100.0, 102.0, 104.0])  # the 1st step ran at t=100, then 2 s per step
    monkeypatch.setattr("midtrain.train.logger.time.monotonic", lambda: next(clock))
    with caplog.at_level(logging.INFO, logger="midtrain.train"):
        logger = RunLogger(tmp_path, cfg, enabled=True)
        for step in (1, 2, 3):
            logger.step(_record(step))
        logger.close()
    messages = [r.getMessage() for r in caplog.records]
    assert str(tmp_path / "tb") in messages[0] and "tensorboard --logdir" in messages[0]
    assert "ETA" not in messages[1]  # one step: no pace yet
    assert messages[2].endswith("ETA 0:00:16") and messages[3].endswith("ETA 0:00:14")  # 8 / 7 steps left x 2 s


def test_tensorboard_off_is_said_and_durations_read_well(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="midtrain.train"):
        RunLogger(tmp_path, tiny_config(), enabled=True).close()
    assert "TensorBoard off" in caplog.records[0].getMessage()
    assert _duration(59.6) == "0:01:00" and _duration(3 * 86400 + 3723) == "3d 1:02:03"
