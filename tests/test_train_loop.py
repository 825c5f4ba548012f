"""Training loop on real packed shards (the packed shard writer + reader): loss, logs, resume, guards, checkpoints."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_helpers import destroy_process_groups, metrics, shards, tiny_config, write_shards  # noqa: F401 (fixtures used by name)

from midtrain.config import ConfigError
from midtrain.train import distributed
from midtrain.train.checkpoint import MARKER, latest_checkpoint, list_checkpoints
from midtrain.train.trainer import EXIT_REQUEUE, NonFiniteError, train

REPO = Path(__file__).resolve().parents[1]


def _run(shards, run_dir, **overrides):
    cfg = tiny_config(**{"data.path": str(shards), "run_dir": str(run_dir), **overrides})
    result = train(cfg)
    distributed.destroy()
    return result


def _latest(run_dir: Path) -> Path:
    """The run's newest complete checkpoint; there must be one."""
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None, f"no checkpoint in {run_dir}"
    return ckpt


@pytest.fixture(scope="module")
def straight_run(shards, tmp_path_factory):
    """12 straight steps (checkpoints at 4, 8, 12), shared by several tests."""
    run_dir = tmp_path_factory.mktemp("straight")
    result = _run(shards, run_dir, **{"optim.train_steps": 12, "checkpoint.keep_last": 3, "log.tensorboard": True})
    return run_dir, result


def test_loss_goes_down_and_everything_is_logged(straight_run):
    run_dir, result = straight_run
    assert result["exit_code"] == 0 and result["step"] == 12
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(1, 13))
    for r in rows:
        for key in ("loss", "lr", "grad_norm", "tokens_per_s", "tflops_per_device"):
            assert isinstance(r[key], float) and r[key] == r[key], key
        assert set(r["loss_by_source"]) == {"repo", "trace"}
    first, last = sum(r["loss"] for r in rows[:3]) / 3, sum(r["loss"] for r in rows[-3:]) / 3
    assert last < first - 0.3, (first, last)
    # warmup (2 steps) then WSD: flat, then decay to min_lr on the last step
    lrs = [r["lr"] for r in rows]
    assert lrs[0] < lrs[1] == lrs[5] and abs(lrs[-1] - 3e-4) < 1e-9
    assert (run_dir / "config.yaml").is_file()
    info = json.loads((run_dir / "run_info.json").read_text())
    assert "sum(l_i^2)" in info["flops_count"] and info["layer_impl"] == "local" and info["data_parallel"] == 1
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    assert [s for s, _ in list_checkpoints(run_dir)] == [4, 8, 12]
    assert _latest(run_dir).name == "iter_0000012"


def test_resume_is_bitwise_exact(straight_run, shards, tmp_path):
    """Steps 1-4, stop, resume, steps 5-12 == 12 straight steps (per-step losses, bitwise on CPU)."""
    run_dir, _ = straight_run
    straight = {r["step"]: r["loss"] for r in metrics(run_dir)}
    resumed_dir = tmp_path / "resumed"
    first = _run(shards, resumed_dir, **{"optim.train_steps": 12, "checkpoint.save_interval": 4})
    assert first["step"] == 12
    # Simulate the stop after step 4: keep only that checkpoint, as a job killed at step 5 leaves it.
    for step, path in list_checkpoints(resumed_dir):
        if step != 4:
            shutil.rmtree(path)
    again = _run(shards, resumed_dir, **{"optim.train_steps": 12})
    assert again["step"] == 12
    rows = metrics(resumed_dir)
    assert [r["step"] for r in rows] == list(range(1, 13))  # steps after the checkpoint were rewritten
    assert {r["step"]: r["loss"] for r in rows} == straight  # bitwise


def test_corrupt_or_partial_checkpoint_falls_back(straight_run, shards, tmp_path):
    src, _ = straight_run
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    newest = run_dir / "checkpoints" / "iter_0000012"
    victim = max((f for f in newest.rglob("*") if f.is_file() and f.name != MARKER), key=lambda f: f.stat().st_size)
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])  # truncated
    (run_dir / "checkpoints" / "iter_0000016.tmp").mkdir()  # an interrupted write
    partial = run_dir / "checkpoints" / "iter_0000020"
    partial.mkdir()  # renamed but marker missing (cannot happen with our writer; still must be ignored)
    assert _latest(run_dir).name == "iter_0000008"
    # Same size, garbage content: the marker check passes, loading fails, the previous one is used.
    ck8 = run_dir / "checkpoints" / "iter_0000008"
    big = max((f for f in ck8.rglob("*.distcp")), key=lambda f: f.stat().st_size)
    big.write_bytes(b"\0" * big.stat().st_size)
    result = _run(
        shards,
        run_dir,
        **{"optim.train_steps": 6, "checkpoint.save_interval": 100, "optim.schedule_on_resume": "checkpoint"},
    )  # a 12-step run cut to 6
    assert result["step"] == 6 and result["exit_code"] == 0
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(1, 7))  # resumed from step 4, ran 5 and 6


def test_nonfinite_loss_stops_naming_step_and_batch(shards, tmp_path):
    with pytest.raises(NonFiniteError, match=r"at step \d+ .*packed sequences \[\d+"):
        _run(
            shards,
            tmp_path / "nan",
            **{"optim.lr": 1e30, "optim.min_lr": 0.0, "optim.clip_grad": 0.0, "optim.warmup_steps": 0},
        )


def test_nonfinite_skip_mode_skips_then_gives_up(shards, tmp_path):
    run_dir = tmp_path / "skip"
    with pytest.raises(NonFiniteError, match="3 skipped steps in a row"):
        _run(
            shards,
            run_dir,
            **{
                "optim.lr": 1e30,
                "optim.min_lr": 0.0,
                "optim.clip_grad": 0.0,
                "optim.warmup_steps": 0,
                "guard.on_nonfinite": "skip",
                "guard.max_skipped": 2,
            },
        )
    rows = metrics(run_dir)
    assert sum(r["skipped"] for r in rows) == 2 and not rows[0]["skipped"]


def test_a_run_stopping_on_nonfinite_values_completes_its_background_checkpoint_writes(shards, tmp_path):
    """checkpoint.async_save: the write in flight when the guard stops the run (step 4 here; the run stops at
    step 5) is completed, not left as an ignored .tmp directory: it holds a step that finished."""
    run_dir = tmp_path / "async_nan"
    with pytest.raises(NonFiniteError, match="4 skipped steps in a row"):
        _run(
            shards,
            run_dir,
            **{
                "optim.lr": 1e30,
                "optim.min_lr": 0.0,
                "optim.clip_grad": 0.0,
                "optim.warmup_steps": 0,
                "guard.on_nonfinite": "skip",
                "guard.max_skipped": 3,
                "checkpoint.async_save": True,
                "checkpoint.save_interval": 2,
                "checkpoint.keep_last": 5,
            },
        )
    assert [r["step"] for r in metrics(run_dir)] == [1, 2, 3, 4]
    assert [step for step, _ in list_checkpoints(run_dir)] == [2, 4]
    assert not list((run_dir / "checkpoints").glob("*.tmp"))
    assert _latest(run_dir).name == "iter_0000004" and (_latest(run_dir) / MARKER).exists()


def test_init_from_midtrain_checkpoint_loads_weights_only(straight_run, shards, tmp_path):
    src, _ = straight_run
    fresh = metrics(src)[0]
    run_dir = tmp_path / "init"
    _run(shards, run_dir, **{"optim.train_steps": 2, "init_from": str(src)})
    row = metrics(run_dir)[0]
    assert row["step"] == 1  # fresh step counter and schedule
    assert row["lr"] == fresh["lr"]
    assert row["loss"] < fresh["loss"] - 0.3  # trained weights


def test_init_from_without_checkpoint_is_a_clear_error(shards, tmp_path):
    with pytest.raises(FileNotFoundError, match="init_from"):
        _run(shards, tmp_path / "x", **{"init_from": str(tmp_path / "nothing")})


def test_seq_length_mismatch_names_the_field(shards, tmp_path):
    with pytest.raises(ConfigError, match="data.seq_length"):
        _run(shards, tmp_path / "x", **{"data.seq_length": 128})


@pytest.mark.slow
def test_sigterm_checkpoints_and_exits_75_then_resumes(shards, tmp_path):
    run_dir = tmp_path / "sig"
    cfg = tiny_config(
        **{
            "data.path": str(shards),
            "run_dir": str(run_dir),
            "optim.train_steps": 400,
            "checkpoint.save_interval": 1000,
            "model.num_layers": 4,
        }
    )
    cfg_path = tmp_path / "cfg.yaml"
    cfg.save_yaml(cfg_path)
    cmd = [sys.executable, "-m", "midtrain.cli", "train", str(cfg_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    log = tmp_path / "train.log"  # a file, not a pipe nobody reads while waiting: a full pipe would stall training
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True)
    metrics_file = run_dir / "metrics.jsonl"
    # Signal only once the loop runs (its handler is installed then); a loaded machine may take minutes to get here.
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if metrics_file.exists() and len(metrics_file.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    assert proc.poll() is None and len(metrics_file.read_text().splitlines()) >= 3, (
        "training ended or never reached step 3 before the signal"
    )
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=600)
    out = log.read_text()
    assert proc.returncode == EXIT_REQUEUE, out[-3000:]
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None
    stopped = int(ckpt.name.split("_")[1])
    assert 3 <= stopped < 400
    assert len(metrics(run_dir)) == stopped
    # Restart on the same run dir: resumes after the checkpoint (train_steps shortened to keep the test quick).
    again = subprocess.run(
        cmd + [f"optim.train_steps={stopped + 2}", "optim.schedule_on_resume=checkpoint"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r["step"] for r in metrics(run_dir)] == list(range(1, stopped + 3))
    assert f"resuming at step {stopped}" in again.stderr


def test_loss_mask_is_honoured_sft_style(tmp_path):
    """Shards with loss masks (assistant-only SFT data) train through the same loop on the target tokens only."""
    from midtrain.formats.shard_reader import PackedDataset, PackedLoader

    shards = write_shards(tmp_path / "sft", sequences=8, seq_length=64, masks=True)
    run_dir = tmp_path / "run"
    _run(shards, run_dir, **{"optim.train_steps": 3, "checkpoint.save_final": False})
    loader = iter(PackedLoader(PackedDataset(shards), seed=tiny_config().data.seed))
    for row in metrics(run_dir):
        expected = sum(float(next(loader)["loss_mask"].sum()) for _ in range(2))
        full = 2 * 64
        assert row["trained_tokens"] == expected and expected < 0.6 * full


def test_a_batch_without_loss_tokens_takes_no_optimizer_step(shards, tmp_path):
    """Adam with zero gradients still moves the weights (its moments, its step count): a loss-free batch (an SFT
    piece that is all prompt) must not. Trained on after it, the weights give exactly the loss they gave before."""
    start = tmp_path / "start"
    _run(shards, start, **{"optim.train_steps": 2})
    empty = write_shards(tmp_path / "empty", sequences=8, seq_length=64, masks=True, loss_free=True)
    _run(empty, tmp_path / "idle", **{"optim.train_steps": 2, "init_from": str(start), "optim.warmup_steps": 0})
    rows = metrics(tmp_path / "idle")
    assert [r["no_loss_tokens"] for r in rows] == [True, True] and all(r["trained_tokens"] == 0 for r in rows)
    one = {"optim.train_steps": 1, "optim.warmup_steps": 0}
    _run(shards, tmp_path / "after_idle", **one, init_from=str(tmp_path / "idle"))
    _run(shards, tmp_path / "direct", **one, init_from=str(start))
    assert metrics(tmp_path / "after_idle")[0]["loss"] == metrics(tmp_path / "direct")[0]["loss"]
    assert metrics(tmp_path / "direct")[0]["no_loss_tokens"] is False


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_step_at_lr_0_leaves_the_weights_as_they_were(shards, tmp_path, dtype):
    """A sweep's null arm: one step through the trainer at LR 0 (in the precision the arms train in); whatever
    starts from its checkpoint starts from the weights it started from, bit for bit."""
    start = tmp_path / "start"
    _run(shards, start, **{"optim.train_steps": 2})
    one = {"optim.train_steps": 1, "optim.warmup_steps": 0, "precision.dtype": dtype}
    _run(shards, tmp_path / "null", **one, init_from=str(start), **{"optim.lr": 0.0, "optim.min_lr": 0.0})
    assert metrics(tmp_path / "null")[0]["lr"] == 0.0
    _run(shards, tmp_path / "from_null", **one, init_from=str(tmp_path / "null"))
    _run(shards, tmp_path / "from_start", **one, init_from=str(start))
    assert metrics(tmp_path / "from_null")[0]["loss"] == metrics(tmp_path / "from_start")[0]["loss"]


def test_weights_only_checkpoint_in_run_dir_starts_fresh_from_its_weights(straight_run, shards, tmp_path):
    """A step-0 weights-only checkpoint (eval's initial weights, an HF conversion) seeds the run, not resumes it."""
    from midtrain.train.checkpoint import save_checkpoint
    from midtrain.train.model import build_gpt_model

    src, _ = straight_run
    run_dir = tmp_path / "w0"
    cfg = tiny_config(**{"data.path": str(shards), "run_dir": str(run_dir)})
    distributed.initialize(seed=cfg.seed)
    save_checkpoint(run_dir, 0, build_gpt_model(cfg), None, {"step": 0, "initial": True}, 1)
    distributed.destroy()
    _run(shards, run_dir, **{"optim.train_steps": 2, "checkpoint.save_final": True})
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["loss"] == metrics(src)[0]["loss"]  # the seeded initial weights, the same first batch
    assert _latest(run_dir).name == "iter_0000002"
