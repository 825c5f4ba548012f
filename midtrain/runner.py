"""The stage runner: datatrove pipelines run in order, locally or as Slurm job arrays, or printed (dry run).

`midtrain prep` (read -> curate -> stats) and `midtrain pack` (tokenize -> pack -> manifest) are both chains
of datatrove stages. A :class:`StageChain` holds one such chain:

- ``executor="local"``: datatrove's LocalPipelineExecutor per stage; :meth:`StageChain.run` runs the stages
  added since the last run, in order (a caller may run part of the chain, check its output, then go on);
- ``executor="slurm"``: datatrove's SlurmPipelineExecutor per stage (one job array each, configured from the
  site config by :func:`midtrain.launch.prep.slurm_executor`), each ``afterok`` the previous one;
  :meth:`StageChain.run` submits the whole chain once (datatrove submits the dependencies first);
- :meth:`StageChain.scripts`: what each stage would run (the sbatch script, or a line for a local stage),
  for ``--dry-run``; nothing is submitted or written.

datatrove writes a completion marker per finished task under each stage's logging dir, so running the same
chain again skips the finished tasks (locally and on Slurm), and each task's stats: :func:`stage_stats` sums a
stage's, :func:`step_totals` gives each step's counts by stat name.
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from midtrain.formats.outputs import LEASE, Lease, die_with_parent
from midtrain.launch.site import load_site
from midtrain.locations import as_path, is_url

log = logging.getLogger(__name__)

EXECUTORS = ("local", "slurm")
LOCK_FILE = LEASE  # what a run leaves in its output while it writes there (never an output of its own)


FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


@contextmanager
def naming_output(output: Any) -> Iterator[None]:
    """A write that failed for space (disk full, quota, file-size limit) without naming its file is re-raised
    naming OUTPUT: a message then says which disk to free."""
    try:
        yield
    except OSError as e:
        if e.errno in FULL and not e.filename:
            raise OSError(e.errno, e.strerror, str(output)) from e
        raise


@contextmanager
def output_lock(output: Any, command: str) -> Iterator[Lease | None]:
    """Hold OUTPUT's lease (formats.outputs.Lease: OUTPUT/.midtrain.lock) while a run writes there: a second
    run is refused with OutputInUse naming the holder, a gone holder's lease is taken over with a warning.
    Yields the lease (its fence goes to the run's workers), None for an output in object storage (no
    exclusive create there: not locked)."""
    if is_url(output):
        yield None
        return
    lease = Lease(output, command).acquire()
    try:
        yield lease
    finally:
        lease.release()


@dataclass
class Stage:
    """One datatrove pipeline of a chain, with its executor (built by :meth:`StageChain.add`)."""

    name: str
    executor: Any
    done: bool = False


class _Children:
    """Registry key for the after-fork hook (multiprocess keeps hooks while their key object lives)."""

    registered = False


_CHILDREN = _Children()


def children_exit_with_parent() -> None:
    """Processes multiprocess forks from this one (datatrove's Manager server, which also keeps the Pool's
    forkserver alive through its inherited pipe) die with it: a killed `midtrain prep` leaves none running."""
    import multiprocess.util

    if not getattr(_CHILDREN, "registered", False):
        multiprocess.util.register_after_fork(_CHILDREN, die_with_parent)
        _CHILDREN.registered = True


class StageChain:
    """Stages run in the order they are added: locally, or submitted to Slurm chained ``afterok``.

    ``site`` (a ``midtrain.launch.site.SiteConfig``) sets the Slurm resources, venv/container and account;
    None loads $MIDTRAIN_SITE or the defaults.
    """

    def __init__(self, executor: str = "local", site: Any = None, workers: int = 1, label: str = "run") -> None:
        if executor not in EXECUTORS:
            raise ValueError(f"executor: {executor!r} is not one of {', '.join(EXECUTORS)}")
        if executor == "slurm" and site is None:  # $MIDTRAIN_SITE, or the defaults
            site = load_site()
        self.executor, self.site, self.workers, self.label = executor, site, workers, label
        self.stages: list[Stage] = []
        self._submitted = False
        if executor == "local":
            children_exit_with_parent()

    @property
    def on_slurm(self) -> bool:
        return self.executor == "slurm"

    def add(
        self, name: str, pipeline: list, tasks: int, logging_dir: str, job_name: str, slurm_logs_dir: str | None = None
    ) -> Any:
        """Append a stage; returns its datatrove executor. On Slurm it depends (afterok) on the previous one."""
        if self.on_slurm:
            # lazy: loads datatrove only when this runs
            from midtrain.launch.prep import slurm_executor

            if slurm_logs_dir is not None and is_url(slurm_logs_dir):
                # Slurm writes its own log files to a filesystem: datatrove's default, ./slurm_logs/JOB/TIME
                # in the submitting directory (the stage's logs and completion markers stay in the bucket).
                slurm_logs_dir = None
            prev = self.stages[-1].executor if self.stages else None
            ex = slurm_executor(
                pipeline,
                self.site,
                job_name=job_name,
                logging_dir=str(logging_dir),
                tasks=tasks,
                depends=prev,
                slurm_logs_dir=slurm_logs_dir,
            )
        else:
            from datatrove.executor import LocalPipelineExecutor

            # no `depends` locally: the chain runs the stages in order itself (a local `depends` would rerun them)
            ex = LocalPipelineExecutor(
                pipeline=pipeline, tasks=tasks, workers=min(self.workers, tasks), logging_dir=str(logging_dir)
            )
        self.stages.append(Stage(name, ex))
        return ex

    def run(self) -> None:
        """Local: run the stages not run yet, in order. Slurm: submit the whole chain (once)."""
        if self.on_slurm:
            if self.stages and not self._submitted:
                left = {s.name: unfinished_tasks(s.executor.logging_dir.path) for s in self.stages}
                for name, tasks in left.items():
                    if tasks:
                        log.warning(
                            "%s: stage %s: %d task(s) of the last submission did not finish: %s",
                            self.label,
                            name,
                            len(tasks),
                            "; ".join(t.describe() for t in tasks),
                        )
                self.stages[-1].executor.run()  # datatrove submits the dependency chain first
                self._submitted = True
                for stage in self.stages:
                    if left[stage.name]:
                        log.warning("%s: stage %s: %s", self.label, stage.name, _resubmitted(stage.executor))
            return
        for stage in self.stages:
            if not stage.done:
                log.info("%s: stage %s", self.label, stage.name)
                stage.executor.run()
                stage.done = True

    def scripts(self) -> dict[str, str]:
        """Per stage, what it would run: the sbatch script (Slurm) or a one-line description (local)."""
        return {s.name: _script(s.executor) for s in self.stages}


def _resubmitted(ex: Any) -> str:
    """Which new array element runs which task (a resubmission numbers its elements from 0 again)."""
    if ex.job_id in (None, -1):
        return "nothing left to submit"
    ranks = json.loads((as_path(ex.logging_dir.path) / "ranks_to_run.json").read_text())
    pairs = ", ".join(f"task {r} -> element {i // ex.tasks_per_job}" for i, r in enumerate(ranks))
    return f"submitted again as job {ex.job_id} ({pairs}; logs {ex.slurm_logs_folder}/{ex.job_id}_ELEMENT.out)"


def _script(ex: Any) -> str:
    if hasattr(ex, "get_sbatch_args"):
        n = ex.world_size if ex.max_array_size == -1 else min(ex.world_size, ex.max_array_size)
        return ex.get_launch_file_contents(ex.get_sbatch_args(n), _run_line(ex))
    return f"# local: {ex.world_size} tasks, logs in {ex.logging_dir.path}"


def _run_line(ex: Any) -> str:
    """The command each array element runs, as datatrove's SlurmPipelineExecutor.launch_job writes it (its srun
    options: --cpus-per-task, a container's flags; one task, -n): a dry run prints the srun that runs."""
    pik = ex.logging_dir.resolve_paths("executor.pik")
    if not ex.with_srun:
        return f"launch_pickled_pipeline {pik}"
    srun_args = " ".join(f"--{k}={v}" for k, v in ex.srun_args.items()) if ex.srun_args else ""
    return f"srun {srun_args} -l -n {ex.nodes_per_task} launch_pickled_pipeline {pik}"


# -- what a Slurm submission left unfinished ---------------------------------------------------------------
@dataclass(frozen=True)
class UnfinishedTask:
    """A datatrove task of a stage's last Slurm submission that left no completion marker."""

    stage: str  # the stage's logging dir name
    task: int  # datatrove's rank
    element: str | None  # the array element that ran it (JOBID_INDEX), None when none started (cancelled, queued)
    log: str | None  # that element's Slurm log

    def describe(self) -> str:
        if self.element is None:
            return f"{self.stage} task {self.task} (never started: cancelled or still queued)"
        return f"{self.stage} task {self.task} (array element {self.element}, log {self.log})"


def unfinished_tasks(logging_dir: Any) -> list[UnfinishedTask]:
    """The tasks datatrove's last Slurm submission of a stage (``ranks_to_run.json`` under LOGGING_DIR, written
    at submission) ran or queued without finishing, each with the array element that ran it and its log: the
    element of position i in ranks_to_run.json is i // tasks_per_job (mod max_array_size), its log the newest
    ``*_ELEMENT.out`` in the stage's Slurm log folder. Empty for a local stage or a finished one."""
    d = as_path(logging_dir)
    try:
        ranks = json.loads((d / "ranks_to_run.json").read_text())
        ex = json.loads((d / "executor.json").read_text())
    except (OSError, ValueError):  # never submitted to Slurm, or datatrove's files are missing
        return []
    per_job = int(ex.get("tasks_per_job") or 1)
    max_array = int(ex.get("max_array_size") or -1)
    logs_dir = ex.get("slurm_logs_folder")
    newest: dict[int, Any] = {}  # element index -> its newest log (read once: a stage may have thousands)
    for f in sorted(as_path(logs_dir).glob("*_*.out"), key=lambda f: f.stat().st_mtime) if logs_dir else []:
        if f.stem.rsplit("_", 1)[1].isdigit():
            newest[int(f.stem.rsplit("_", 1)[1])] = f
    out = []
    for pos, rank in enumerate(ranks):
        if (d / "completions" / f"{rank:05d}").exists():
            continue
        log = newest.get(pos // per_job % max_array if max_array > 0 else pos // per_job)
        out.append(UnfinishedTask(d.name, rank, log.stem if log else None, str(log) if log else None))
    return out


# -- what the stages counted ------------------------------------------------------------------------------
def stage_stats(logging_dir: Any) -> list[dict]:
    """Sum of a stage's per-task datatrove stats, as datatrove's JSON (one dict a step: name, stats, time);
    the local and the Slurm executors write them alike, under the stage's logging dir (a path or a URL's)."""
    from datatrove.utils.stats import PipelineStats

    total = PipelineStats()
    for f in sorted((logging_dir / "stats").glob("*.json")):
        total = total + PipelineStats.from_json(json.loads(f.read_text()))
    return json.loads(total.to_json()) if total.stats else []


def stat_total(stat: Any) -> int:
    """A stat's count: datatrove writes a counter as a number, a metric as {"total": ..., "n": ...}."""
    if isinstance(stat, dict):
        value: Any = stat.get("total", stat.get("n", 0))  # a JSON number
        return int(value)
    return int(stat or 0)


def step_label(step: dict) -> str:
    """'🧹 - CURATE: 🔐 redact secrets/PII' -> 'redact secrets/PII' (datatrove's repr of a step, readable)."""
    name = str(step.get("name") or "").split(": ", 1)[-1]
    return "".join(c for c in name if c.isascii()).strip() or "step"


def step_totals(stages: Iterable[list[dict]]) -> dict[str, dict[str, int]]:
    """{step label: {stat: total}} over the stages' stats (:func:`stage_stats`); steps of one label summed."""
    out: dict[str, dict[str, int]] = {}
    for steps in stages:
        for step in steps:
            mine = out.setdefault(step_label(step), {})
            for key, value in step.get("stats", {}).items():
                mine[key] = mine.get(key, 0) + stat_total(value)
    return out
