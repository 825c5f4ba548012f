"""Run directories: when a run has reached its last step (what the demo, the probe and the sweep reuse)."""

from __future__ import annotations

import json

from midtrain.formats.checkpoints import latest_step
from midtrain.formats.rundir import CHECKPOINTS, MARKER
from midtrain.formats.stamp import reached_step


def _checkpoint(run_dir, step, complete=True):
    d = run_dir / CHECKPOINTS / f"iter_{step:07d}"
    d.mkdir(parents=True)
    (d / "weights.bin").write_bytes(b"w" * 8)
    if complete:
        (d / MARKER).write_text(json.dumps({"files": {"weights.bin": 8}}))


def test_finished_means_a_complete_checkpoint_at_that_step(tmp_path):
    run = tmp_path / "run"
    assert not reached_step(run, 4) and latest_step(run) is None  # nothing there yet
    _checkpoint(run, 2)
    assert reached_step(run, 2) and not reached_step(run, 4) and latest_step(run) == 2
    _checkpoint(run, 4, complete=False)  # a save cut short at the last step: not finished
    assert not reached_step(run, 4) and latest_step(run) == 2
    (run / CHECKPOINTS / "iter_0000004" / MARKER).write_text(json.dumps({"files": {"weights.bin": 8}}))
    assert reached_step(run, 4) and latest_step(run) == 4
    # a checkpoint directory given as the run: its own step
    assert latest_step(run / CHECKPOINTS / "iter_0000002") == 2 and not reached_step(
        run / CHECKPOINTS / "iter_0000002", 4
    )
