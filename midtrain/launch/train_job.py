"""The training job: render slurm/train_{gpu,cpu}.sbatch for a resolved TrainConfig, write it into the run directory.

The caller resolves the recipe (the application's ``submit train`` does, with its overrides checked).

Layout written under RUN_DIR/slurm/: ``train.sbatch`` (what was submitted), ``config.yaml`` (the resolved
TrainConfig, run_dir absolute), ``site.yaml`` (the resolved site config), ``logs/train-<jobid>_<restart>.out``
(one log per start of the job; ``logs/train-<jobid>.out`` holds Slurm's own messages) and ``status/`` (each
rank's pid and exit status per start). Every rank runs ``midtrain train RUN_DIR/slurm/config.yaml``: the
job, and each requeue of it, trains exactly the config resolved at submission and resumes from run_dir's
newest checkpoint. A relative run_dir is resolved against the site's workdir (where the job runs), not
the submitting directory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from midtrain.config import ConfigError
from midtrain.launch.render import check_cpus, check_mounted, job_body, render, sbatch_lines
from midtrain.launch.shell import qargv
from midtrain.launch.site import JobResources, SiteConfig
from midtrain.train.layout import resolve_data_parallel

if TYPE_CHECKING:
    from midtrain.train.config import TrainConfig


@dataclass
class TrainJob:
    config: TrainConfig  # the resolved TrainConfig
    site: SiteConfig
    resources: JobResources
    run_dir: Path
    job_name: str
    script: str  # rendered sbatch text

    @property
    def slurm_dir(self) -> Path:
        return self.run_dir / "slurm"

    @property
    def script_path(self) -> Path:
        return self.slurm_dir / "train.sbatch"

    @property
    def log_pattern(self) -> str:
        return str(self.slurm_dir / "logs" / "train-%j.out")

    def log_path(self, job_id: str, restart: int = 0) -> Path:
        """The log of one start of the job (restart 0 is the first)."""
        return self.slurm_dir / "logs" / f"train-{job_id}_{restart}.out"

    def check_paths(self) -> None:
        """Refuse node-local paths for what the ranks read and write (the run dir, the data, the workdir)."""
        paths = {"run_dir": str(self.run_dir), "workdir": self.site.job_workdir()}
        data = getattr(getattr(self.config, "data", None), "path", None)
        if data and "://" not in str(data):
            paths["data.path"] = str(data)
        self.site.check_shared(paths)

    def write(self) -> Path:
        """Write the script and the resolved configs into RUN_DIR/slurm/; returns the script path. Refuses
        node-local paths (what the login node writes under its /tmp no compute node sees)."""
        self.check_paths()
        (self.slurm_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.script_path.write_text(self.script)
        self.config.save_yaml(self.slurm_dir / "config.yaml")
        self.site.save_yaml(self.slurm_dir / "site.yaml")
        return self.script_path


def train_argv(config_path: Path) -> list[str]:
    """What each rank runs after ``python -m midtrain.cli``: the resolved config, replayed."""
    return ["train", str(config_path)]


def world_size(res: JobResources) -> int:
    return res.nodes * res.ranks_per_node


def check_layout(cfg: TrainConfig, res: JobResources) -> None:
    """The parallel layout must fit the allocation (the trainer's own rule, checked before submitting)."""

    world = world_size(res)
    try:
        resolve_data_parallel(cfg, world)
    except ConfigError as e:
        raise ConfigError(f"{e} (the job has {res.nodes} node(s) x {res.ranks_per_node} ranks = {world})") from None


def build_train_job(
    cfg: TrainConfig, site: SiteConfig, resources: JobResources | None = None, job_name: str | None = None
) -> TrainJob:
    """Check the resolved TrainConfig ``cfg`` against the allocation and render the job script."""
    res = (resources or site.train).validate()
    check_layout(cfg, res)
    check_cpus(site, res, "train")
    run_dir = site.job_path(cfg.run_dir)
    cfg = replace(cfg, run_dir=str(run_dir))  # the job and its requeues read exactly this path
    name = job_name or f"mt-{cfg.name}"
    gpu = res.gpus_per_node > 0
    slurm_dir = run_dir / "slurm"
    data = getattr(getattr(cfg, "data", None), "path", None)
    mounts = [str(run_dir)] + ([str(site.job_path(data))] if data and "://" not in str(data) else [])
    if cfg.init_from:  # read-only weights: the site must mount them (the run and data dirs are mounted here)
        check_mounted(site, {"init_from": cfg.init_from}, mounts)
    values = {
        "sbatch": sbatch_lines(
            site, res, job_name=name, log_file=str(slurm_dir / "logs" / "train-%j.out"), gpu=gpu, requeue=True
        ),
        **job_body(
            site,
            res,
            argv=qargv(train_argv(slurm_dir / "config.yaml"), "train argv"),
            log_file=str(slurm_dir / "logs" / "train"),
            status_dir=str(slurm_dir / "status"),
            mounts=mounts,
        ),
    }
    script = render("train.sbatch", values, what=f"train job {name}")
    return TrainJob(cfg, site, res, run_dir, name, script)


def resources_with(base: JobResources, **changes: Any) -> JobResources:
    """``base`` with the given fields changed (None = keep)."""
    return replace(base, **{k: v for k, v in changes.items() if v is not None})
