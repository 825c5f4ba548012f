"""The single-node test cluster (tests/slurm/cluster.sh) as a session fixture, plus job-waiting helpers.

Tests marked ``slurm`` take the ``slurm_cluster`` fixture. Where the cluster cannot start (not root, no
packages, no apt) they skip with the reason; with CI=true it must start, so the fixture fails instead.
A cluster that was already running (an earlier session, or started by hand) is reused. Several pytest
sessions on one machine share the cluster: each holds a lease file while it runs, and the last one out stops
the cluster, and only if a test session started it (a cluster started by hand is left running).
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
    """Start (or reuse) the test cluster; yields its state dir. The last session using it stops it (see above)."""
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
    state = Path(os.environ.get("MIDTRAIN_SLURM_DIR", "/tmp/midtrain-slurm"))
    leases = state / "test-sessions"
    leases.mkdir(parents=True, exist_ok=True)
    if proc.stdout.strip().endswith("started"):
        (state / "started-by-tests").touch()
    lease = leases / str(os.getpid())
    lease.touch()
    yield state
    lease.unlink(missing_ok=True)
    if _live_leases(leases) or not (state / "started-by-tests").exists() or os.environ.get("MIDTRAIN_SLURM_KEEP"):
        return  # another session still uses it, or it was not started by tests
    (state / "started-by-tests").unlink(missing_ok=True)
    subprocess.run(["bash", str(CLUSTER_SH), "stop"], capture_output=True, text=True, timeout=120)


def _live_leases(leases: Path) -> list[Path]:
    """Lease files of pytest sessions still running (a killed session's stale lease is removed)."""
    live = []
    for f in leases.iterdir():
        try:
            os.kill(int(f.name), 0)
            live.append(f)
        except (ValueError, ProcessLookupError):
            f.unlink(missing_ok=True)
        except PermissionError:  # alive, another user's
            live.append(f)
    return live
