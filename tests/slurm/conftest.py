"""The single-node test cluster (tests/slurm/cluster.sh) as a session fixture, plus job-waiting helpers.

Tests marked ``slurm`` take the ``slurm_cluster`` fixture. Where the cluster cannot start (not root, no
packages, no apt) they skip with the reason; with CI=true it must start, so the fixture fails instead.
A cluster that was already running (an earlier session, or started by hand) is reused and left running.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CLUSTER_SH = Path(__file__).with_name("cluster.sh")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def slurm_cluster():
    """Start (or reuse) the test cluster; yields its state dir. Stops it at the end if this session started it."""
    if os.geteuid() != 0:
        reason = "the test Slurm cluster needs root (daemons run as root without systemd)"
        if _in_ci():
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    try:
        proc = subprocess.run(["bash", str(CLUSTER_SH), "start"], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        proc = None
    if proc is None or proc.returncode != 0:
        detail = "timed out after 900 s" if proc is None else (proc.stderr.strip().splitlines() or ["?"])[-1]
        reason = f"test Slurm cluster did not start: {detail}"
        if _in_ci():
            pytest.fail(f"CI=true and {reason}\n{proc.stderr if proc else ''}")
        pytest.skip(reason)
    started = proc.stdout.strip().endswith("started")
    yield Path(os.environ.get("MIDTRAIN_SLURM_DIR", "/tmp/midtrain-slurm"))
    if started and not os.environ.get("MIDTRAIN_SLURM_KEEP"):
        subprocess.run(["bash", str(CLUSTER_SH), "stop"], capture_output=True, text=True, timeout=120)
