"""The training job's launch path on the real cluster (TaskPlugin=task/affinity), with a stand-in for the
trainer so each rank's behaviour is chosen: one USR1 per rank from one forwarder per node, a requeue decided
on the checkpointed rank's record while a late rank is killed, a scancel that ends a step job (CANCELLED,
never requeued), and the hang watchdog killing a silent start, which is retried; each checks the ranks' CPU
binding as it goes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_helpers import cluster_site, job_state, wait_for, wait_job, wait_started

from midtrain.commands.submit import train_job
from midtrain.launch.protocol_job import build_chains, write_jobs
from midtrain.launch.sbatch import submit
from midtrain.launch.site import load_site

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# Stands in for `midtrain.cli` in each rank (run by the real midtrain.launch.rank): records its CPUs; on the
# first start waits for USR1/TERM, then rank 0 "checkpoints" and exits 75 once the batch script says it
# forwarded the signal, while rank 1 never returns (a late rank); on a restart both finish at once. In mode
# "ignore" no rank ever returns (an eval that ignores TERM), in mode "hang" a rank sleeps and prints nothing;
# in mode "unreachable" each rank removes the pid record the forwarder reads, and ends once the batch script
# has said what became of the signal.
RANK_STUB = r"""
import os, signal, sys, time
from pathlib import Path

out = Path(os.environ["STUB_OUT"])
rank, restart = os.environ["SLURM_PROCID"], os.environ.get("SLURM_RESTART_COUNT", "0")
(out / f"cpus.{restart}.{rank}").write_text(" ".join(map(str, sorted(os.sched_getaffinity(0)))))
if restart != "0":
    sys.exit(0)
if os.environ["STUB_MODE"] == "hang":
    (out / f"ready.{rank}").touch()
    time.sleep(900)
sigs = {signal.SIGUSR1, signal.SIGTERM}
signal.pthread_sigmask(signal.SIG_BLOCK, sigs)  # each one received below, one at a time, none lost
log = Path(os.environ["STUB_LOGS"]) / f"train-{os.environ['SLURM_JOB_ID']}_0.out"
if os.environ["STUB_MODE"] == "unreachable":
    status = log.parent.parent / "status" / f"{os.environ['SLURM_JOB_ID']}.0"
    for pid in status.glob(f"pid.*.{rank}"):
        pid.unlink()
(out / f"ready.{rank}").touch()
got = []
deadline = time.time() + 900
while time.time() < deadline:
    info = signal.sigtimedwait(sigs, 0.2)
    if info is not None:
        got.append(signal.Signals(info.si_signo).name)
        (out / f"signals.{rank}").write_text(" ".join(got))
    if got and rank == "0" and os.environ["STUB_MODE"] == "signal" and "forwarded to the ranks" in log.read_text():
        sys.exit(75)
    if os.environ["STUB_MODE"] == "unreachable" and any(w in log.read_text() for w in ("USR1 not", "USR1 forw")):
        sys.exit(0)
sys.exit(1)
"""


def _job(tmp_path: Path, mode: str, tasks: int, cpus: int, step: bool = False, gpus: int = 0, **site_changes):
    """A training job (or with ``step`` a protocol step job) whose ranks run RANK_STUB (a `python` first on
    PATH swaps midtrain.cli for it)."""
    stub = tmp_path / "stub"
    (stub / "bin").mkdir(parents=True)
    (stub / "rank_stub.py").write_text(RANK_STUB)
    py = stub / "bin" / "python"
    py.write_text(
        '#!/bin/bash\nargs=()\nfor a in "$@"; do [ "$a" = midtrain.cli ] && a=rank_stub; args+=("$a"); '
        f'done\nexec {sys.executable} "${{args[@]}}"\n'
    )
    py.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    run_dir = tmp_path / "run"
    env = {
        "PATH": f"{stub / 'bin'}:{os.environ['PATH']}",
        "PYTHONPATH": str(stub),
        "STUB_OUT": str(out),
        "STUB_LOGS": str(run_dir / "slurm" / "logs"),
        "STUB_MODE": mode,
    }
    # gpus > 0: a GPU-shaped job on the node's GRES GPUs (dummy devices), sharing the node with other jobs
    gpu = {"gpus_per_node": gpus, "exclusive": False} if gpus else {}
    path = cluster_site(tmp_path, tasks_per_node=tasks, cpus_per_task=cpus, mem="1G", **gpu)
    site = load_site(path, [f"{k}={v}" for k, v in site_changes.items()])
    site.env.update(env)
    if step:
        site.protocol["default"]["tasks_per_node"] = tasks
        jobs = build_chains(site, tmp_path / "protocol" / "slurm", {"base": [("sft", ["sft", "x"])]})  # 2 ranks
        write_jobs(jobs)
        job = jobs.chains["base"][0]
        return job, out, submit(job.script_path)
    job = train_job(
        "demo_tiny", [f"run_dir={run_dir}", "optim.global_batch_size=2"], site, job_name=f"mt-launch-{mode}"
    )
    job.write()
    return job, out, submit(job.script_path)


def _logs(job) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-2000:]}" for p in sorted((job.slurm_dir / "logs").glob("*.out")))


def _wait_ready(job_id: str, out: Path, job) -> None:
    wait_started(job_id)
    wait_for(
        lambda: (
            (out / "ready.0").exists()
            and (out / "ready.1").exists()
            or job_state(job_id).get("JobState") not in ("RUNNING", "CONFIGURING", "PENDING")
        ),
        300,
        f"both ranks of job {job_id} started\n{_logs(job)}",
    )
    assert (out / "ready.0").exists() and (out / "ready.1").exists(), _logs(job)


def _wait_requeued_and_done(job_id: str, job) -> dict:
    # Slurm holds a requeued job until its old credential expires (10 s here), then starts it again
    info = wait_job(job_id, timeout=600)
    assert info["JobState"] == "COMPLETED", f"{info.get('JobState')} {info.get('ExitCode')}\n{_logs(job)}"
    assert info["Restarts"] == "1", _logs(job)
    return info


def test_usr1_to_the_batch_shell_reaches_each_rank_once_and_requeues_despite_a_late_rank(slurm_cluster, tmp_path):
    job, out, job_id = _job(tmp_path, "signal", tasks=2, cpus=1)
    _wait_ready(job_id, out, job)
    # as --signal=B:USR1@N sends it before the time limit (and preemption with send_user_signal)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], check=True)
    _wait_requeued_and_done(job_id, job)
    first = (job.slurm_dir / "logs" / f"train-{job_id}_0.out").read_text()
    # one forwarder task per node: each rank got the signal exactly once (as USR1, which the trainer handles)
    # (the killed rank may also see the TERM that ended the step)
    got = [(out / f"signals.{r}").read_text().split() for r in (0, 1)]
    assert got[0] == ["SIGUSR1"] and got[1][:1] == ["SIGUSR1"] and got[1].count("SIGUSR1") == 1, (got, first)
    # rank 0 checkpointed (exit 75), the late rank was killed: srun's code is not 75, and the job requeued
    assert "1 rank(s) checkpointed and stopped" in first and "srun exit 75," not in first, first
    assert f"requeueing job {job_id}" in first
    assert (job.slurm_dir / "logs" / f"train-{job_id}_1.out").exists()
    # two tasks of one CPU each on this node: each bound to its own CPU
    cpus = [(out / f"cpus.0.{r}").read_text() for r in (0, 1)]
    assert all(len(c.split()) == 1 for c in cpus) and cpus[0] != cpus[1], cpus


@pytest.mark.parametrize("gpus", [0, 2])
def test_a_usr1_that_cannot_reach_the_ranks_is_an_error_in_the_log_and_the_job_state(slurm_cluster, tmp_path, gpus):
    """The forwarder finds no rank to signal: the log says so (never "forwarded"), the job's Comment records it
    and the job fails instead of completing. With GPUs as GRES the forwarder's srun itself must also start."""
    job, out, job_id = _job(tmp_path, "unreachable", tasks=2, cpus=1, gpus=gpus)
    _wait_ready(job_id, out, job)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], check=True)
    info = wait_job(job_id, timeout=600)
    first = (job.slurm_dir / "logs" / f"train-{job_id}_0.out").read_text()
    assert info["JobState"] == "FAILED" and info["Restarts"] == "0", (info, first)
    assert "ERROR: USR1 not delivered to every rank" in first and "USR1 forwarded" not in first, first
    assert "has recorded its pid" in first, first  # the forwarder's own reason
    assert "Invalid Trackable RESource" not in first, first
    shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    assert "Comment=midtrain: USR1 not delivered" in shown, shown


def _step_log(job, job_id: str) -> Path:
    return Path(job.log_path.replace("%j", job_id))


def test_scancel_ends_a_step_job_whose_ranks_ignore_term(slurm_cluster, tmp_path):
    """A step (the SFT probe, 2 ranks) that ignores TERM: scancel ends it (KillWait later, SIGKILL) as CANCELLED, not requeued."""
    job, out, job_id = _job(tmp_path, "ignore", tasks=2, cpus=1, step=True, max_retries=2)
    wait_started(job_id)
    wait_for(
        lambda: (
            (out / "ready.0").exists()
            and (out / "ready.1").exists()
            or job_state(job_id).get("JobState") not in ("RUNNING", "CONFIGURING", "PENDING")
        ),
        300,
        f"both ranks of job {job_id} started",
    )
    subprocess.run(["scancel", job_id], check=True)
    log = _step_log(job, job_id)
    # the batch script's TERM trap ran (it logs at once): from here on the script cannot requeue the job
    wait_for(lambda: "TERM: the job is ending" in log.read_text(), 300, f"job {job_id} got TERM\n{log.read_text()}")
    info = wait_job(job_id, timeout=300)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", (info, log.read_text())
    assert "requeueing job" not in log.read_text()
    assert not (log.parent / log.name.replace("_0.out", "_1.out")).exists()


@pytest.mark.parametrize("gpus", [0, 2])
def test_hang_watchdog_kills_a_silent_start_and_the_retry_completes(slurm_cluster, tmp_path, gpus):
    # 15 s of silence: a few times what starting the rank takes on a loaded machine (the rank must be up and
    # hanging when the watchdog fires, asserted below), and the job's wall time is mostly this wait. With GPUs
    # as GRES the watchdog's srun must start in a job that holds them.
    job, out, job_id = _job(tmp_path, "hang", tasks=1, cpus=2, gpus=gpus, hang_timeout_s=15, max_retries=1)
    _wait_requeued_and_done(job_id, job)
    first = (job.slurm_dir / "logs" / f"train-{job_id}_0.out").read_text()
    assert "no progress for" in first and "after it hung: retry 1 of max_retries=1" in first, first
    assert (out / "ready.0").exists(), "the rank never started: the watchdog fired before it could hang"
    # task/affinity binds each task to the CPUs of its step: srun --cpus-per-task gives the rank both
    assert len((out / "cpus.0.0").read_text().split()) == 2, _logs(job)
