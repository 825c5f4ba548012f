"""Talking to Slurm: submit a script (optionally after other jobs), submit an afterok chain, read job state.

Arguments go to ``sbatch``/``scontrol`` as argument vectors (no shell), so nothing here is interpreted by a
shell; the scripts themselves were rendered and checked by :mod:`midtrain.launch.render`.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from midtrain.launch.shell import LaunchError

log = logging.getLogger(__name__)


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise LaunchError(f"{tool}: not found on PATH; submit from a Slurm login node (or use --dry-run)")
    return path


def dependency_options(after: list[str] | None = None, dependency: str = "afterok") -> dict[str, str]:
    """The sbatch options (name -> value) of every job that waits on others: midtrain's chains (``after``:
    the job ids) and datatrove's prep stages (no ``after``: datatrove names the job it waits for itself).

    ``--kill-on-invalid-dep=yes`` cancels a job whose dependency can never be met (an afterok on a job that
    failed). Without it, and without ``DependencyParameters=kill_invalid_depend`` on the cluster (Slurm's
    default), such a job stays PENDING forever (Reason=DependencyNeverSatisfied)."""
    opts = {"kill-on-invalid-dep": "yes"}
    if after:
        opts["dependency"] = f"{dependency}:{':'.join(after)}"
    return opts


def submit(
    script: str | Path,
    *,
    after: list[str] | None = None,
    dependency: str = "afterok",
    extra_args: list[str] | None = None,
) -> str:
    """``sbatch --parsable SCRIPT``; with ``after``, the job waits for those jobs (``dependency`` type) and is
    cancelled if one of them fails (for afterok). Returns the job id."""
    cmd = [_need("sbatch"), "--parsable", *(extra_args or [])]
    if after:
        cmd += [f"--{k}={v}" for k, v in dependency_options(after, dependency).items()]
    cmd.append(str(script))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LaunchError(f"sbatch {script}: {proc.stderr.strip() or proc.stdout.strip()} (exit {proc.returncode})")
    job_id = proc.stdout.strip().split(";")[0]  # --parsable: "id" or "id;cluster"
    if not job_id.isdigit():
        raise LaunchError(f"sbatch {script}: unexpected output {proc.stdout!r}")
    log.info("submitted %s as job %s%s", script, job_id, f" ({dependency} {','.join(after)})" if after else "")
    return job_id


def submit_chain(scripts: list[str | Path], after: list[str] | None = None) -> list[str]:
    """Submit scripts so each starts only after the previous one succeeded (afterok); returns the job ids.

    A failed link cancels the rest of the chain (``--kill-on-invalid-dep``) instead of leaving it pending.
    """
    ids: list[str] = []
    for script in scripts:
        prev = [ids[-1]] if ids else after
        ids.append(submit(script, after=prev))
    return ids


def job_info(job_id: str) -> dict[str, str]:
    """``scontrol show job -o ID`` as a dict (JobState, ExitCode, Restarts, StartTime, ...); {} if unknown."""
    proc = subprocess.run([_need("scontrol"), "show", "job", "-o", str(job_id)], capture_output=True, text=True)
    if proc.returncode != 0:
        return {}
    info: dict[str, str] = {}
    for token in proc.stdout.split():
        if "=" in token:
            key, value = token.split("=", 1)
            info.setdefault(key, value)
    return info
