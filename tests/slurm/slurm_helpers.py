"""Helpers for the Slurm tests: wait for jobs, a site config for the test cluster.

Waits are deadlines on a state, never fixed sleeps: they are sized for a slow machine shared with other
CPU-heavy work (a job that finishes in 20 s alone can take minutes there) and return as soon as the state is
reached, so a generous deadline costs nothing when the machine is fast.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Final job states (scontrol show job); a requeued job passes through PENDING again.
FINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}


def job_state(job_id: str) -> dict[str, str]:
    from midtrain.launch.sbatch import job_info

    return job_info(job_id)


# How long a job may wait in the queue before it starts: the single node may be busy with other jobs (another
# test session's), which says nothing about the code under test, so this is generous and separate.
QUEUE_TIMEOUT_S = 1800


def wait_started(job_id: str, queue_timeout: float = QUEUE_TIMEOUT_S, poll: float = 1.0) -> dict[str, str]:
    """Wait until the job has left PENDING (running or already ended); returns its scontrol record."""
    t0 = time.time()
    info: dict[str, str] = {}
    while time.time() - t0 < queue_timeout:
        info = job_state(job_id)
        if info.get("JobState") not in ("PENDING", None) or info == {}:
            return info
        time.sleep(poll)
    subprocess.run(["scancel", str(job_id)], capture_output=True)
    pytest.fail(f"job {job_id} still queued after {queue_timeout:.0f}s ({info.get('Reason')})")


def wait_job(job_id: str, timeout: float, poll: float = 1.0) -> dict[str, str]:
    """Wait until the job is in a final state; returns its scontrol record. ``timeout`` counts from when the job
    left the queue (time spent PENDING behind other jobs is bounded by QUEUE_TIMEOUT_S instead); fails with the
    job's state when either runs out."""
    wait_started(job_id, poll=poll)
    t0 = time.time()
    info: dict[str, str] = {}
    while time.time() - t0 < timeout:
        info = job_state(job_id)
        if info.get("JobState") in FINAL:
            return info
        if info.get("JobState") == "PENDING":  # requeued: its wait in the queue does not count either
            wait_started(job_id, poll=poll)
            t0 = time.time()
        time.sleep(poll)
    subprocess.run(["scancel", str(job_id)], capture_output=True)
    pytest.fail(f"job {job_id} not finished after {timeout:.0f}s: {info.get('JobState')} ({info.get('Reason')})")


def wait_for(done, timeout: float, what: str, poll: float = 1.0) -> None:
    """Poll ``done()`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    t0 = time.time()
    while not done():
        if time.time() - t0 > timeout:
            pytest.fail(f"{what}: not reached after {timeout:.0f}s")
        time.sleep(poll)


def cluster_site(tmp_path: Path, **train: object) -> Path:
    """A site config for the test cluster: CPU jobs, the repo as workdir, this venv."""
    import yaml

    site = {
        "name": "test-cluster",
        "workdir": str(REPO),
        "node_local_paths": [],  # one node: its /tmp (pytest's tmp dirs) is every job's
        "signal_before_s": 30,
        "max_requeues": 3,
        "env": {"OMP_NUM_THREADS": "1"},
        "train": {
            "nodes": 1,
            "gpus_per_node": 0,
            "tasks_per_node": 2,
            "cpus_per_task": 1,
            "mem": "4G",
            "time": "00:20:00",
            **train,
        },
        "protocol": {"default": {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "mem": "1G", "time": "00:05:00"}},
        "prep": {"tasks": 2, "time": "00:10:00", "cpus_per_task": 1, "mem_per_cpu_gb": 1},
    }
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    return path
