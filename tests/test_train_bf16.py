"""bf16 training on CPU through megatron-core's mixed-precision path (Float16Module, fp32 master weights in
the optimizer, the distributed optimizer): loaded weights survive the first update, resume is bit-exact.

With bf16 the optimizer keeps fp32 master copies of the weights and copies them into the model after every
update, so weights loaded after the optimizer was built would be replaced by the initial random ones at
step 1 — the loss would jump back to ln(vocab). These tests hold that down for every way weights arrive.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_helpers import destroy_process_groups, metrics, shards, tiny_config  # noqa: F401 (fixtures used by name)

from midtrain.train import distributed
from midtrain.train.checkpoint import MARKER, list_checkpoints
from midtrain.train.gpu_choices import native_bf16_cpu
from midtrain.train.trainer import train

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
RANDOM_LOSS = math.log(256)  # a random model on the tiny vocabulary


def _config(shards: Path, run_dir: Path, **overrides):
    return tiny_config(
        **{
            "data.path": str(shards),
            "run_dir": str(run_dir),
            "precision.dtype": "bf16",
            "optim.lr": 1e-2,
            "optim.min_lr": 1e-3,
            **overrides,
        }
    )


def _run(shards: Path, run_dir: Path, **overrides) -> list[dict]:
    result = train(_config(shards, run_dir, **overrides))
    distributed.destroy()
    assert result["exit_code"] == 0
    return metrics(run_dir)


def _losses(rows: list[dict]) -> list[float]:
    return [r["loss"] for r in rows]


@pytest.fixture(scope="module")
def trained(shards, tmp_path_factory):
    """12 bf16 steps from random weights (checkpoints at 4, 8, 12): the model the init tests load."""
    run_dir = tmp_path_factory.mktemp("bf16_trained")
    rows = _run(shards, run_dir, **{"optim.train_steps": 12, "checkpoint.keep_last": 3})
    distributed.destroy()
    return run_dir, rows


def _assert_keeps_loaded_weights(rows: list[dict], trained_rows: list[dict]) -> None:
    """The loaded model's loss at step 1, and no step after it goes back towards a random model's."""
    losses = _losses(rows)
    random_first = trained_rows[0]["loss"]
    assert random_first == pytest.approx(RANDOM_LOSS, abs=0.3)  # the control: step 1 from random weights
    gap = random_first - losses[0]
    assert gap > 0.5, (random_first, losses)  # step 1 saw the loaded weights
    # every later step stays near the loaded model (at most a third of the way back to random)
    assert max(losses) < losses[0] + gap / 3, losses


def test_bf16_trains_from_random_weights(trained):
    _, rows = trained
    losses = _losses(rows)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5, losses


def test_bf16_init_from_midtrain_checkpoint_keeps_the_weights(trained, shards, tmp_path):
    src, trained_rows = trained
    rows = _run(shards, tmp_path / "init", init_from=str(src), **{"optim.train_steps": 5})
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]  # fresh step counter
    _assert_keeps_loaded_weights(rows, trained_rows)


def test_bf16_weights_only_checkpoint_in_run_dir_keeps_the_weights(trained, shards, tmp_path):
    """The other weights-only path: a step-0 checkpoint without optimizer state inside the run dir."""
    from midtrain.train.checkpoint import load_weights, save_checkpoint
    from midtrain.train.model import build_gpt_model

    src, trained_rows = trained
    run_dir = tmp_path / "w0"
    cfg = _config(shards, run_dir)
    distributed.initialize(seed=cfg.seed)
    model = build_gpt_model(cfg)
    load_weights(src, model)  # the trained weights (bf16 tensors loaded into an fp32 model: upcast)
    save_checkpoint(run_dir, 0, model, None, {"step": 0, "initial": True}, 1)
    distributed.destroy()
    rows = _run(shards, run_dir, **{"optim.train_steps": 5})
    _assert_keeps_loaded_weights(rows, trained_rows)


@pytest.mark.slow
def test_bf16_init_from_hugging_face_keeps_the_weights(trained, shards, tmp_path):
    from midtrain.train.hf_export import export_hf

    src, trained_rows = trained
    hf = export_hf(src, tmp_path / "hf")
    rows = _run(shards, tmp_path / "from_hf", init_from=str(hf), **{"optim.train_steps": 5})
    _assert_keeps_loaded_weights(rows, trained_rows)
    # the same weights as loading the midtrain checkpoint directly: the same first loss
    direct = _run(shards, tmp_path / "direct", init_from=str(src), **{"optim.train_steps": 2})
    assert rows[0]["loss"] == pytest.approx(direct[0]["loss"], abs=1e-4)


@pytest.mark.slow
def test_bf16_resume_after_kill_is_bitwise_exact(trained, shards, tmp_path):
    """Kill -9 a bf16 run after its step-4 checkpoint; the resumed run repeats the straight run bit for bit."""
    _, straight = trained
    run_dir = tmp_path / "killed"
    cfg = _config(shards, run_dir, **{"optim.train_steps": 12, "checkpoint.keep_last": 3})
    cfg_path = tmp_path / "cfg.yaml"
    cfg.save_yaml(cfg_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    # its own process group: the kill takes the trainer and megatron's checkpoint-writer helper together
    proc = subprocess.Popen(
        [sys.executable, "-m", "midtrain.cli", "train", str(cfg_path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    marker = run_dir / "checkpoints" / "iter_0000004" / MARKER
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None and not marker.exists():
        time.sleep(0.05)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # no handler, no final save
    _, err = proc.communicate(timeout=60)
    assert marker.exists(), err[-3000:]
    # A fast machine may have got further before the kill: drop what came after step 4, as if killed there.
    for step, path in list_checkpoints(run_dir):
        if step > 4:
            shutil.rmtree(path)
    rows = _run(shards, run_dir, **{"optim.train_steps": 12, "checkpoint.keep_last": 3})
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert _losses(rows) == _losses(straight)  # bitwise
    assert [r["grad_norm"] for r in rows] == [r["grad_norm"] for r in straight]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(cfg_path: Path, nproc: int, *overrides: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [
        str(TORCHRUN),
        "--nproc-per-node",
        str(nproc),
        "--master-port",
        str(_free_port()),
        "-m",
        "midtrain.cli",
        "train",
        str(cfg_path),
        *overrides,
    ]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]


@pytest.mark.slow
def test_bf16_distributed_optimizer_dp2_keeps_init_weights_and_resumes_exactly(trained, shards, tmp_path):
    """megatron's distributed optimizer (fp32 master shards, reduce-scatter/all-gather over gloo), DP=2:
    init_from weights survive; a resume from its (dp_reshardable) checkpoint repeats the steps bit for bit."""
    src, trained_rows = trained
    run_dir = tmp_path / "dopt"
    cfg = _config(
        shards,
        run_dir,
        init_from=str(src),
        **{
            "optim.train_steps": 6,
            "optim.global_batch_size": 4,
            "parallel.data": 2,
            "parallel.distributed_optimizer": True,
            "checkpoint.save_interval": 3,
            "checkpoint.keep_last": 2,
        },
    )
    cfg_path = tmp_path / "cfg.yaml"
    cfg.save_yaml(cfg_path)
    _torchrun(cfg_path, 2)
    first = metrics(run_dir)
    assert [r["step"] for r in first] == list(range(1, 7))
    _assert_keeps_loaded_weights(first, trained_rows)
    shutil.rmtree(run_dir / "checkpoints" / "iter_0000006")
    _torchrun(cfg_path, 2)
    again = metrics(run_dir)
    assert [r["step"] for r in again] == list(range(1, 7))
    assert _losses(again) == _losses(first)
    # it resumed at step 3 (steps 4-6 of the first run set aside), not restarted from init_from: a restart
    # gives the same losses, which is how a failing load went unnoticed
    assert [
        json.loads(line)["step"] for line in (run_dir / "metrics.after_step_0000003.jsonl").read_text().splitlines()
    ] == [4, 5, 6]


def test_async_checkpoint_saves_complete_and_resume_bitwise(trained, shards, tmp_path):
    """checkpoint.async_save: the background writes end as complete checkpoints (marker, rename) that a
    restart resumes from bit for bit; training itself is unchanged."""
    _, straight = trained
    run_dir = tmp_path / "async"
    over = {"optim.train_steps": 12, "checkpoint.keep_last": 3, "checkpoint.async_save": True}
    rows = _run(shards, run_dir, **over)
    assert _losses(rows) == _losses(straight)
    assert [s for s, _ in list_checkpoints(run_dir)] == [4, 8, 12]
    assert all((p / MARKER).is_file() for _, p in list_checkpoints(run_dir))
    assert not list((run_dir / "checkpoints").glob("*.tmp"))
    for step, path in list_checkpoints(run_dir):
        if step > 4:
            shutil.rmtree(path)
    again = _run(shards, run_dir, **over)
    assert _losses(again) == _losses(straight)


def test_bf16_on_a_cpu_that_emulates_it_is_named(shards, tmp_path, caplog):
    """A bf16 run on a CPU without AMX or AVX512-BF16 says that torch emulates bf16 there (many times slower
    than fp32), and names the setting that trains at full speed; where the CPU has them, nothing is said."""
    with caplog.at_level("WARNING", logger="midtrain.train"):
        _run(shards, tmp_path / "run", **{"optim.train_steps": 1, "optim.warmup_steps": 0})
    warned = "torch emulates bf16 here" in caplog.text and "precision.dtype=fp32" in caplog.text
    assert warned == (not native_bf16_cpu()), caplog.text
