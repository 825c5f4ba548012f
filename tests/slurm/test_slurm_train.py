"""Training on the real single-node cluster via `midtrain submit train`: a CPU job with 2 ranks (srun, gloo,
DP=2) trains and checkpoints; a job signalled mid-run checkpoints, exits 75, requeues itself, resumes, and
ends with exactly the losses of the uninterrupted run; a job scancelled mid-run ends CANCELLED, not requeued."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_helpers import REPO, cluster_site, job_state, wait_job, wait_started

sys.path.insert(0, str(REPO / "tests"))  # the tiny-shard writer (tests/train_helpers.py)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = 16


def _tiny(run_dir: Path, shards: Path) -> list[str]:
    """demo_tiny shrunk to a few-second CPU model on tiny shards (the same overrides for both runs)."""
    return [
        f"run_dir={run_dir}",
        f"data.path={shards}",
        "data.seq_length=64",
        "precision.dtype=fp32",
        "precision.transformer_impl=local",
        "model.vocab_size=256",
        "model.hidden_size=64",
        "model.ffn_hidden_size=128",
        "model.max_position_embeddings=512",
        "optim.lr=0.003",
        "optim.min_lr=0.0003",
        "optim.warmup_steps=2",
        f"optim.train_steps={STEPS}",
        "optim.global_batch_size=2",
        "checkpoint.save_interval=4",
        "checkpoint.keep_last=2",
        "log.tensorboard=false",
        "name=slurm_tiny",
    ]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from train_helpers import write_shards

    return write_shards(tmp_path_factory.mktemp("shards"), sequences=48, seq_length=64, vocab=256)


def _submit(tmp_path: Path, overrides: list[str], **train: object) -> tuple[str, Path]:
    site = cluster_site(tmp_path, **train)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "midtrain.cli",
            "submit",
            "train",
            "demo_tiny",
            *overrides,
            "--site",
            str(site),
            "--job-name",
            f"mt-{tmp_path.name[-20:]}",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    m = re.search(r"submitted job (\d+)", r.stdout)
    assert m, r.stdout
    log = re.search(r"log:\s+(\S+)", r.stdout)
    assert log, r.stdout
    return m.group(1), Path(log.group(1))


def _losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {int(r["step"]): float(r["loss"]) for r in rows}


def _usr1_pending(pid: int, sig: int = signal.SIGUSR1) -> bool:
    """USR1 (or SIG) queued for a (stopped) process: its bit of SigPnd/ShdPnd in /proc/PID/status."""
    status = Path(f"/proc/{pid}/status").read_text()
    masks = [int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("SigPnd", "ShdPnd"))]
    return any(m & (1 << (sig - 1)) for m in masks)


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").glob("iter_*"))


@pytest.fixture(scope="module")
def reference_run(slurm_cluster, shards, tmp_path_factory):
    """The uninterrupted 2-rank CPU run (also the acceptance check of a plain training job)."""
    tmp = tmp_path_factory.mktemp("ref")
    run_dir = tmp / "run"
    job_id, log = _submit(tmp, _tiny(run_dir, shards))
    info = wait_job(job_id, timeout=600)
    text = log.read_text() if log.exists() else "(no log)"
    assert info["JobState"] == "COMPLETED", f"{info.get('JobState')} {info.get('ExitCode')}\n{text[-3000:]}"
    return run_dir, log, info


def test_cpu_training_job_two_ranks_trains_and_checkpoints(reference_run):
    run_dir, log, info = reference_run
    slurm_dir = run_dir / "slurm"
    assert (slurm_dir / "train.sbatch").is_file() and (slurm_dir / "config.yaml").is_file()
    assert "#SBATCH --ntasks-per-node=2" in (slurm_dir / "train.sbatch").read_text()
    text = log.read_text()
    assert "1 nodes x 2 ranks" in text and "master " in text
    losses = _losses(run_dir)
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert losses[STEPS] < losses[1], "loss did not go down"
    assert _checkpoints(run_dir)[-1] == f"iter_{STEPS:07d}"
    assert info["Restarts"] == "0"


# A GPU-shaped job on the test cluster's node with GPUs as GRES (dummy devices, so the trainer runs on
# CPU/gloo): sbatch --gpus-per-node=2 exports SLURM_GPUS_PER_NODE, which every srun in the job reads, the
# USR1 forwarder's included. Not exclusive, so it shares the node with other tests' jobs.
GPU_SHAPE = {"gpus_per_node": 2, "tasks_per_node": None, "exclusive": False}


@pytest.mark.parametrize("shape", ["cpus", "gres_gpus"])
def test_signalled_job_checkpoints_requeues_and_matches_uninterrupted_run(reference_run, shards, tmp_path, shape):
    ref_dir = reference_run[0]
    run_dir = tmp_path / "run"
    job_id, log = _submit(tmp_path, _tiny(run_dir, shards), **(GPU_SHAPE if shape == "gres_gpus" else {}))
    if shape == "gres_gpus":
        assert "#SBATCH --gpus-per-node=2" in (run_dir / "slurm" / "train.sbatch").read_text()
    metrics = run_dir / "metrics.jsonl"
    pid_dir = run_dir / "slurm" / "status" / f"{job_id}.0"
    wait_started(job_id)  # the node may be busy with other jobs first
    t0 = time.time()
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        state = job_state(job_id).get("JobState")
        assert state in ("PENDING", "RUNNING", "CONFIGURING"), f"job ended before it could be signalled: {state}"
        assert time.time() - t0 < 600, "training did not reach step 2 within 600 s of the job starting"
        time.sleep(0.05)
    # Hold the ranks (as a slow machine would) so the signal lands mid-run however fast training is here,
    # then signal the batch script exactly as --signal=B:USR1@N does before the time limit.
    pids = [int(p.read_text()) for p in pid_dir.glob("pid.*")]
    assert len(pids) == 2
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], check=True)
        t0 = time.time()
        while not all(_usr1_pending(pid) for pid in pids):  # the script's forwarder reached both ranks
            assert time.time() - t0 < 120, f"USR1 was not forwarded to the ranks\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    # the job requeues itself: it comes back PENDING with a restart count. Slurm holds a requeued job until its
    # old credential has expired (BeginTime = requeue + AuthInfo cred_expire, 10 s on the test cluster); forcing
    # an earlier start makes slurmd kill it ("Job credential revoked"), so the test waits for Slurm to start it.
    t0 = time.time()
    while True:
        info = job_state(job_id)
        if info.get("Restarts", "0") != "0" and info.get("JobState") == "PENDING":
            break
        assert info.get("JobState") not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), (
            f"job ended instead of requeueing: {info.get('JobState')}\n{log.read_text()[-3000:]}"
        )
        assert time.time() - t0 < 300, f"job not requeued: {info.get('JobState')}"
        time.sleep(0.5)
    text = log.read_text()
    assert "exit 75" in text and "requeueing job" in text, text[-3000:]
    interrupted_at = _checkpoints(run_dir)[-1]
    assert interrupted_at < f"iter_{STEPS:07d}", "the signal came too late to interrupt the run"
    info = wait_job(job_id, timeout=600)
    restart_log = log.with_name(log.name.replace("_0.out", "_1.out"))  # one log per start of the job
    text = restart_log.read_text() if restart_log.exists() else "(no restart log)"
    assert info["JobState"] == "COMPLETED", f"{info.get('JobState')}\n{text[-3000:]}"
    assert info["Restarts"] == "1"
    assert "restart 1" in text and "0: " in text  # ranks' lines labelled (srun --label)
    assert _losses(run_dir) == _losses(ref_dir)  # bit-identical: exact resume of model, optimizer and data
    assert _checkpoints(run_dir)[-1] == f"iter_{STEPS:07d}"


def test_scancel_ends_a_running_training_job(slurm_cluster, shards, tmp_path):
    """slurmd sends TERM to every step and the batch shell: the trainer checkpoints, and the job stays
    CANCELLED (the batch script used to requeue it on TERM and it trained on to the end)."""
    run_dir = tmp_path / "run"
    job_id, log = _submit(tmp_path, _tiny(run_dir, shards) + ["--site-set", "max_retries=2"])
    metrics = run_dir / "metrics.jsonl"
    wait_started(job_id)
    t0 = time.time()
    while not (metrics.exists() and metrics.read_text().strip()):
        assert job_state(job_id).get("JobState") in ("PENDING", "RUNNING", "CONFIGURING"), log.read_text()[-3000:]
        assert time.time() - t0 < 600, "training did not reach step 1 within 600 s of the job starting"
        time.sleep(0.05)
    subprocess.run(["scancel", job_id], check=True)
    t0 = time.time()
    while "TERM: the job is ending" not in log.read_text():  # the batch script's trap ran: it cannot requeue
        assert time.time() - t0 < 300, f"the batch script got no TERM\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    info = wait_job(job_id, timeout=300)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", (info, log.read_text()[-3000:])
    assert "requeueing job" not in log.read_text()
    assert len(_losses(run_dir)) < STEPS, "the job trained to the end after scancel"


def test_a_term_to_the_batch_shell_checkpoints_and_ends_the_gpu_job_cancelled(slurm_cluster, shards, tmp_path):
    """`scancel --batch --signal=TERM` reaches the batch shell only: the script passes TERM to each rank (not
    to srun, which would kill them), they checkpoint and stop, and the job ends CANCELLED, not requeued, with
    a checkpoint that resumes (it used to end FAILED 137 with none)."""
    from midtrain.train import checkpoint as ckpt

    run_dir = tmp_path / "run"
    job_id, log = _submit(tmp_path, _tiny(run_dir, shards) + ["--site-set", "max_retries=2"], **GPU_SHAPE)
    metrics = run_dir / "metrics.jsonl"
    pid_dir = run_dir / "slurm" / "status" / f"{job_id}.0"
    wait_started(job_id)
    t0 = time.time()
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        assert job_state(job_id).get("JobState") in ("PENDING", "RUNNING", "CONFIGURING"), log.read_text()[-3000:]
        assert time.time() - t0 < 600, "training did not reach step 2 within 600 s of the job starting"
        time.sleep(0.05)
    pids = [int(p.read_text()) for p in pid_dir.glob("pid.*")]
    assert len(pids) == 2
    for pid in pids:  # held, so the TERM lands mid-run however fast training is here
        os.kill(pid, signal.SIGSTOP)
    try:
        subprocess.run(["scancel", "--batch", "--signal=TERM", job_id], check=True)
        t0 = time.time()
        while not all(_usr1_pending(pid, signal.SIGTERM) for pid in pids):
            assert time.time() - t0 < 120, f"TERM was not passed on to the ranks\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    info = wait_job(job_id, timeout=600)
    text = log.read_text()
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", (info, text[-3000:])
    assert "2 rank(s) checkpointed and stopped" in text and "requeueing job" not in text, text[-3000:]
    last = _checkpoints(run_dir)[-1]
    assert last < f"iter_{STEPS:07d}", "the TERM came too late to interrupt the run"
    assert last == f"iter_{max(_losses(run_dir)):07d}", "the stop did not checkpoint its last step"
    assert ckpt.resume_problem(run_dir / "checkpoints" / last) is None
