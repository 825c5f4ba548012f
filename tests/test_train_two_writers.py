"""#53 case 7: two `midtrain train` on one run_dir: the second is refused (exit 3) naming the first, before it
writes anything; the first trains on. Real megatron-core on CPU; the test waits for the first's lease file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from train_helpers import tiny_config, write_shards

from midtrain.formats.outputs import EXIT_REFUSED, LEASE

WAIT_S = 300  # a loaded 2-core machine imports megatron slowly
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def _train(recipe: Path, run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "midtrain.cli", "train", str(recipe), f"run_dir={run_dir}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _endless_recipe(tmp_path: Path, global_batch_size: int | None = None) -> Path:
    """A tiny training too long to finish while a test runs (the test kills it), as a recipe file."""
    shards = write_shards(tmp_path / "shards", sequences=8, seq_length=64)
    recipe = tmp_path / "tiny.yaml"
    cfg = tiny_config(**{"optim.train_steps": 100000, "optim.warmup_steps": 1, "checkpoint.save_interval": 100000})
    cfg.data.path = str(shards)
    if global_batch_size is not None:
        cfg.optim.global_batch_size = global_batch_size
    cfg.save_yaml(recipe)
    return recipe


def _wait_gone(pids: list[int], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running after {what} died: {pids}"
        time.sleep(0.05)


def test_a_second_training_of_one_run_dir_is_refused_naming_the_first(tmp_path):
    run_dir = tmp_path / "run"
    # still training when the second starts; killed by the test once that one has been refused
    recipe = _endless_recipe(tmp_path)
    first = _train(recipe, run_dir)
    try:
        deadline = time.monotonic() + WAIT_S
        while not (run_dir / "metrics.jsonl").exists():  # it holds the lease and has trained a step
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            assert time.monotonic() < deadline, "the first training never logged a step"
            time.sleep(0.05)
        second = subprocess.run(
            [sys.executable, "-m", "midtrain.cli", "train", str(recipe), f"run_dir={run_dir}"],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )
        assert second.returncode == EXIT_REFUSED, second.stderr[-2000:]
        lines = [line for line in second.stderr.splitlines() if line.startswith("midtrain train: refused:")]
        assert len(lines) == 1 and f"pid {first.pid} on" in lines[0] and "Traceback" not in second.stderr
        assert first.poll() is None  # the first trains on
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(WAIT_S)
    assert (run_dir / LEASE).exists()  # killed: left behind, taken over by the next start (its pid is gone)


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_trainer_leaves_no_checkpoint_helper_running(tmp_path):
    """kill -9 of the trainer alone (not its group): megatron's checkpoint-writer helper, which ignores SIGTERM,
    dies with it instead of living on (it was found alive, 316 MB, 50 minutes later)."""
    trainer = _train(_endless_recipe(tmp_path), tmp_path / "run")
    helpers: list[int] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while not (tmp_path / "run" / "metrics.jsonl").exists():  # it trains: the helper was started before
            assert trainer.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        helpers = _children(trainer.pid)
        assert helpers, "the trainer started no helper process"
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(WAIT_S)
        _wait_gone(helpers, "the trainer")
    finally:
        for p in helpers:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        if trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGKILL)


def test_a_killed_torchrun_leaves_no_rank_training(tmp_path):
    """kill -9 of torchrun alone (its agent, not the group): both ranks end with it instead of training on
    (they were fenced from publishing, but alive, holding what a requeued job needs)."""
    recipe = _endless_recipe(tmp_path, global_batch_size=2)
    run_dir = tmp_path / "run"
    agent = subprocess.Popen(
        [TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "midtrain.cli", "train", str(recipe)]
        + [f"run_dir={run_dir}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    ranks: list[int] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while not (run_dir / "metrics.jsonl").exists():  # both ranks are in the loop: a step was logged
            assert agent.poll() is None and time.monotonic() < deadline, "torchrun never trained a step"
            time.sleep(0.05)
        ranks = [p for p in _children(agent.pid) if _alive(p)]
        assert len(ranks) == 2, ranks
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(WAIT_S)
        _wait_gone(ranks, "torchrun")
    finally:
        for p in ranks:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
