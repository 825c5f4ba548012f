"""Site config: what differs between clusters (partitions, account, container or venv, per-job resources).

Recipes say *what* to train; the site config says *where*: a small YAML file (see slurm/site.example.yaml)
loaded with ``--site PATH`` or ``$MIDTRAIN_SITE``. Every value here ends up in a generated sbatch script,
so :mod:`midtrain.launch.shell` checks and quotes each one when it is rendered.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midtrain.config import Config, ConfigError, require

# Slurm's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
EPHEMERAL = 32768  # Linux's default ip_local_port_range starts here


def time_to_seconds(value: str) -> int:
    """Seconds in a Slurm time limit ("1-02:00:00", "30:00", "90")."""
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = int(d)
        parts = [int(p) for p in value.split(":")]  # D-HH[:MM[:SS]]
        parts += [0] * (3 - len(parts))
        h, m, s = parts
    else:
        parts = [int(p) for p in value.split(":")]  # MM | MM:SS | HH:MM:SS
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, (m, s) = 0, parts
        else:
            h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


def _check_time(value: str, name: str) -> None:
    require(bool(_TIME.match(value)), name, f"'{value}' is not a Slurm time (e.g. 04:00:00, 1-00:00:00, 30)")


@dataclass
class JobResources(Config):
    """One job's allocation. gpus_per_node=0 makes it a CPU job (the CPU training template, gloo)."""

    partition: str | None = None  # None = the site's partition
    nodes: int = 1
    gpus_per_node: int = 8
    tasks_per_node: int | None = None  # None = one rank per GPU (GPU jobs), 1 (CPU jobs)
    cpus_per_task: int = 8
    mem: str | None = None  # sbatch --mem per node ("0" = all of it, "64G"); None = the partition default
    time: str = "04:00:00"
    exclusive: bool | None = None  # whole nodes (sbatch --exclusive) for this job; None = the site's rule

    @property
    def ranks_per_node(self) -> int:
        if self.tasks_per_node is not None:
            return self.tasks_per_node
        return self.gpus_per_node if self.gpus_per_node > 0 else 1

    def check(self) -> None:
        require(self.nodes >= 1, "nodes", "must be >= 1")
        require(self.gpus_per_node >= 0, "gpus_per_node", "must be >= 0 (0 = CPU job)")
        require(self.tasks_per_node is None or self.tasks_per_node >= 1, "tasks_per_node", "must be >= 1")
        require(self.cpus_per_task >= 1, "cpus_per_task", "must be >= 1")
        require(
            self.mem is None or bool(re.match(r"^\d+[KMGT]?$", self.mem)),
            "mem",
            f"'{self.mem}' is not an sbatch --mem value (e.g. 0, 64G, 512000M)",
        )
        _check_time(self.time, "time")


@dataclass
class PrepResources(Config):
    """datatrove SlurmPipelineExecutor job arrays for `midtrain prep --executor slurm`."""

    partition: str | None = None  # None = the site's partition
    qos: str | None = None  # None = the site's qos
    tasks: int = 64  # datatrove tasks (array elements) per stage unless the stage fixes it
    workers: int = -1  # array elements running at once (-1 = no limit)
    time: str = "04:00:00"
    cpus_per_task: int = 1
    mem_per_cpu_gb: int = 2
    max_array_size: int = 1001  # the cluster's MaxArraySize
    sbatch_args: dict[str, str] = field(default_factory=dict)  # extra directives, e.g. {constraint: cpu}

    def check(self) -> None:
        require(self.tasks >= 1, "tasks", "must be >= 1")
        require(self.workers == -1 or self.workers >= 1, "workers", "must be -1 (no limit) or >= 1")
        require(self.cpus_per_task >= 1, "cpus_per_task", "must be >= 1")
        require(self.mem_per_cpu_gb >= 1, "mem_per_cpu_gb", "must be >= 1")
        require(self.max_array_size >= 1, "max_array_size", "must be >= 1")
        _check_time(self.time, "time")


def _default_protocol() -> dict[str, dict[str, Any]]:
    return {"default": {"gpus_per_node": 8, "time": "04:00:00"}}  # sft: one rank per GPU


def _one_gpu(default: JobResources) -> int:
    return min(1, default.gpus_per_node)  # a CPU-only site (default gpus_per_node: 0) asks for none


# What each built-in step changes from the site's `default` entry; a site's own entry for the step is merged over
# this field by field, so a site that writes only `default` (or only `eval_proxy.time`) keeps the rest. Evals
# are one process each (proxy metrics on one GPU; SWE-bench drives its own workers): the 1-GPU ones share a
# node instead of holding all of its GPUs; the report is a CPU job.
STEP_CHANGES: dict[str, Callable[[JobResources], dict[str, Any]]] = {
    "eval_proxy": lambda d: {"gpus_per_node": _one_gpu(d), "time": "02:00:00", "exclusive": False},
    "eval_lm_eval": lambda d: {"gpus_per_node": _one_gpu(d), "time": "02:00:00", "exclusive": False},
    "eval_swebench": lambda d: {"tasks_per_node": 1, "time": "1-00:00:00"},
    "report": lambda d: {"gpus_per_node": 0, "tasks_per_node": None, "cpus_per_task": 2, "time": "00:30:00"},
}


@dataclass
class SiteConfig(Config):
    """A cluster: where jobs run, how they get their Python, and how much each kind of job asks for."""

    name: str = "default"
    partition: str | None = None  # None = the cluster's default partition
    account: str | None = None
    qos: str | None = None
    sbatch_args: list[str] = field(default_factory=list)  # extra directives for every job, e.g. --constraint=h200
    exclusive: bool = True  # GPU jobs take whole nodes (sbatch --exclusive), as Megatron-Bridge's scripts do
    cpus_per_node: int | None = None  # CPUs a job may ask for per node as Slurm counts them; checked when set
    # Paths that are not the same on every node (checked for what compute nodes read or write); None = /tmp,
    # /var/tmp, /dev/shm and $TMPDIR. A single-node cluster (the test cluster) sets [].
    node_local_paths: list[str] | None = None
    # Python on the nodes: a pyxis/enroot container image, or a venv on a shared filesystem.
    container_image: str | None = None
    container_mounts: list[str] = field(default_factory=list)  # SRC:DST[:FLAGS], srun --container-mounts
    # the workdir and the job's run/output directory are mounted at the same path when no mount covers them;
    # $HOME is not mounted (its ~/.local packages would shadow the image's); the container is unnamed, so
    # pyxis removes it when the step ends
    container_mount_home: bool = False
    venv: str | None = None  # None (and no container) = the venv running `midtrain submit`
    workdir: str | None = None  # the midtrain checkout the jobs run in; None = the submitting directory
    env: dict[str, str] = field(default_factory=dict)  # exported in every job (after the template's defaults)
    # Requeue: Slurm sends USR1 this long before the time limit; the trainer checkpoints and exits 75,
    # the script requeues the job, and the restart resumes from the checkpoint.
    signal_before_s: int = 300
    max_requeues: int = 20
    # A start that crashes (a non-zero exit other than 75, the hang watchdog's kill included) is requeued up
    # to max_retries times over the job's life; 0 = a crash ends the job (FAILED).
    max_retries: int = 0
    # Hang watchdog: a start whose log (every rank's output) gets nothing for this long has its ranks killed
    # (a crash, retried as above); 0 = off. Longer than the slowest quiet stretch: a checkpoint save, a data
    # build, log.interval steps.
    hang_timeout_s: int = 0
    # MASTER_PORT = base + job id % (32768 - base): no clash between jobs on a node, and below Linux's
    # ephemeral ports (32768+, where any process's outgoing connection may already hold it)
    master_port_base: int = 20000
    train: JobResources = field(default_factory=lambda: JobResources(mem="0"))
    # per step name (or `default`): only the fields a site changes; see step_resources for how they merge
    protocol: dict[str, dict[str, Any]] = field(default_factory=_default_protocol)
    prep: PrepResources = field(default_factory=PrepResources)

    def check(self) -> None:
        require(self.signal_before_s >= 0, "signal_before_s", "must be >= 0")
        require(self.max_requeues >= 0, "max_requeues", "must be >= 0")
        require(self.max_retries >= 0, "max_retries", "must be >= 0")
        require(
            self.hang_timeout_s == 0 or self.hang_timeout_s >= 10, "hang_timeout_s", "must be 0 (off) or >= 10 seconds"
        )
        require(
            1024 <= self.master_port_base <= EPHEMERAL - 1000,
            "master_port_base",
            f"must be in [1024, {EPHEMERAL - 1000}] (ports from {EPHEMERAL} up are Linux's ephemeral range)",
        )
        require(self.cpus_per_node is None or self.cpus_per_node >= 1, "cpus_per_node", "must be >= 1 (or null)")
        require("default" in self.protocol, "protocol", "needs a 'default' entry (resources of any other step)")
        for step in self.protocol:
            self.step_resources(step)  # each entry's fields typed and checked, naming protocol.STEP.FIELD
        for item in self.sbatch_args:
            require(item.startswith("--"), "sbatch_args", f"'{item}' is not a long sbatch option (--name[=value])")
        require(
            not (self.container_image and self.venv),
            "venv",
            "set either container_image or venv, not both (the container brings its own Python)",
        )

    def step_resources(self, step: str) -> JobResources:
        """STEP's resources: JobResources' defaults, then the site's `default` entry, then what the built-in
        step changes from that (STEP_CHANGES), then the site's own entry for the step, each field by field."""
        default = self._entry({}, "default")
        if step == "default":
            return default
        built_in = STEP_CHANGES[step](default) if step in STEP_CHANGES else {}
        return self._entry({**default.to_dict(), **built_in}, step)

    def _entry(self, base: dict[str, Any], step: str) -> JobResources:
        path = f"protocol.{step}"
        own = self.protocol.get(step, {})
        if not isinstance(own, dict):
            raise ConfigError(f"{path}: expected a mapping of JobResources fields, got {own!r}")
        res = JobResources.from_dict({**base, **own}, _path=path)
        try:
            return res.validate()
        except ConfigError as e:
            raise ConfigError(f"{path}.{e}") from None

    def python_env(self) -> str | None:
        """The venv to activate in jobs: the configured one, else the one running now (when in a venv)."""
        if self.container_image:
            return None
        if self.venv:
            return self.venv
        return sys.prefix if sys.prefix != sys.base_prefix else None

    def job_workdir(self) -> str:
        """The absolute directory jobs run in (relative paths in a job resolve there)."""
        return os.path.abspath(os.path.expanduser(self.workdir)) if self.workdir else os.getcwd()

    def job_path(self, path: str | Path) -> Path:
        """PATH as a job sees it: a relative path resolved against the workdir, not the submitting directory."""
        p = Path(os.path.expanduser(str(path)))
        return p if p.is_absolute() else Path(self.job_workdir()) / p

    def master_port_span(self) -> int:
        return min(20000, EPHEMERAL - self.master_port_base)

    def local_paths(self) -> list[str]:
        if self.node_local_paths is not None:
            return list(self.node_local_paths)
        found = ["/tmp", "/var/tmp", "/dev/shm"]
        tmpdir = os.environ.get("TMPDIR")
        return found + ([tmpdir] if tmpdir and tmpdir not in found else [])

    def check_shared(self, paths: Mapping[str, str | Path]) -> None:
        """Refuse a path compute nodes read or write that lies under a node-local directory (the login node's
        /tmp is not the compute node's); ``paths`` maps what each one is to the path."""
        for what, path in paths.items():
            p = os.path.abspath(str(self.job_path(path)))
            for local in self.local_paths():
                root = os.path.abspath(local)
                if p == root or p.startswith(root.rstrip("/") + "/"):
                    raise ConfigError(
                        f"{what}: {p} is under {root}, which is local to each node (site "
                        "node_local_paths); compute nodes would not see what the login node wrote "
                        "there. Use a shared filesystem (or set node_local_paths: [] on a "
                        "single-node cluster)"
                    )


def load_site(path: str | Path | None = None, overrides: list[str] | None = None) -> SiteConfig:
    """The site config from PATH, else $MIDTRAIN_SITE, else the defaults; ``key=value`` overrides applied."""
    path = path or os.environ.get("MIDTRAIN_SITE")
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"site config '{p}' does not exist (see slurm/site.example.yaml)")
        try:
            site = SiteConfig.from_yaml(p)
        except ConfigError as e:
            raise ConfigError(f"site config {p}: {e}") from None
    else:
        site = SiteConfig()
    return site.apply_overrides(overrides or []).validate()
