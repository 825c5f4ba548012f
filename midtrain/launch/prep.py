"""datatrove's SlurmPipelineExecutor configured from the site config (for `midtrain prep --executor slurm`).

Each prep stage becomes one job array (one element per datatrove task) plus datatrove's stats-merge job;
stages chain with afterok through ``depends``, and a stage (with its stats merge) is cancelled when an
element of the stage before it fails (``--kill-on-invalid-dep``), not left pending. datatrove writes a
completion marker per finished task under the stage's logging dir, so relaunching the same command submits
only the tasks that did not finish.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datatrove.executor.slurm import SlurmPipelineExecutor

from midtrain.launch.render import container_mounts, covered
from midtrain.launch.sbatch import dependency_options
from midtrain.launch.shell import LaunchError, directive, q
from midtrain.launch.site import SiteConfig


def env_command(site: SiteConfig) -> str:
    """Shell lines datatrove puts in its array script before ``launch_pickled_pipeline``: the checkout and
    the venv (datatrove's workers unpickle midtrain's pipeline steps, so they need the same Python)."""
    lines = [f"cd {q(site.job_workdir(), 'workdir')}"]
    venv = site.python_env()
    if venv:
        lines.append(f"source {q(str(Path(venv) / 'bin' / 'activate'), 'venv')}")
    if site.env:
        lines += [f"export {k}={q(v, f'env.{k}')}" for k, v in site.env.items()]
    return "\n".join(lines)


def slurm_executor_kwargs(
    site: SiteConfig, *, job_name: str, logging_dir: str, tasks: int | None = None, slurm_logs_dir: str | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``SlurmPipelineExecutor(pipeline, **kwargs)`` from ``site.prep``."""
    prep = site.prep
    partition = prep.partition or site.partition
    # datatrove writes every sbatch option, srun option and path below into its script unquoted: each one
    # must be a plain token (directive), or it is refused here, naming the field
    sbatch_args: dict[str, Any] = {
        directive(k, "prep.sbatch_args key"): directive(v, f"prep.sbatch_args.{k}") for k, v in prep.sbatch_args.items()
    }
    if site.account:
        sbatch_args["account"] = directive(site.account, "account")
    # datatrove chains each stage (and its stats merge) afterok on the stage before: one failed element must
    # cancel them, not leave them pending (the same options as midtrain's own chains)
    sbatch_args.update(dependency_options())
    logging_dir = directive(logging_dir, "logging dir (prep/pack --output)")
    if slurm_logs_dir:
        slurm_logs_dir = directive(slurm_logs_dir, "slurm logs dir (prep/pack --output)")
    # datatrove runs `srun launch_pickled_pipeline ...` in each element. srun does not inherit sbatch's
    # --cpus-per-task on Slurm 22.05-23.02: without its own, each element is bound to one CPU
    srun_args = {"cpus-per-task": str(prep.cpus_per_task)}
    if site.container_image:
        # the image comes in through srun's pyxis flags
        mounts = container_mounts(site, [])
        for d in (logging_dir, slurm_logs_dir):
            # the stage's documents go beside its logs: mounting the logs alone would leave them in the
            # container, lost when it ends, so the output must lie under one of the site's mounts
            if d and "://" not in d and not covered(d, mounts):
                raise LaunchError(
                    f"prep/pack --output: {d} is not under any of the site's container_mounts "
                    f"({', '.join(mounts)}); what the jobs write there would stay inside the "
                    "container. Add a mount covering it (e.g. /scratch:/scratch)"
                )
        srun_args |= {
            "container-image": directive(site.container_image, "container_image"),
            "container-workdir": directive(site.job_workdir(), "workdir"),
            "container-mounts": directive(",".join(mounts), "container_mounts"),
        }
        if not site.container_mount_home:
            # a flag without a value, which datatrove's `--KEY=VALUE` rendering has no form for: it follows
            # the last option's value as its own word
            srun_args["container-workdir"] += " --no-container-mount-home"
    return dict(
        tasks=tasks or prep.tasks,
        time=directive(prep.time, "prep.time"),
        # datatrove always writes --partition; '' would be invalid, so fall back to Slurm's default name
        partition=directive(partition, "prep.partition") if partition else None,
        cpus_per_task=prep.cpus_per_task,
        mem_per_cpu_gb=prep.mem_per_cpu_gb,
        workers=prep.workers,
        job_name=directive(job_name, "job name"),
        qos=directive(prep.qos or site.qos, "prep.qos") if (prep.qos or site.qos) else "",
        env_command=env_command(site),
        sbatch_args=sbatch_args,
        srun_args=srun_args,
        max_array_size=prep.max_array_size,
        logging_dir=logging_dir,
        slurm_logs_folder=slurm_logs_dir or None,
        mail_user=None,
    )


class SharedPathsSlurmExecutor(SlurmPipelineExecutor):
    """datatrove's executor, refusing at submission (not in a dry run's script) a stage whose logs or output
    lie under a node-local directory of the site (the login node's /tmp is not the compute nodes')."""

    midtrain_site: SiteConfig | None = None

    def launch_job(self):
        if self.midtrain_site is not None and "://" not in self.logging_dir.path:
            self.midtrain_site.check_shared(
                {"prep/pack --output (logging dir)": self.logging_dir.path, "workdir": self.midtrain_site.job_workdir()}
            )
        return super().launch_job()


def slurm_executor(
    pipeline: list,
    site: SiteConfig,
    *,
    job_name: str,
    logging_dir: str,
    tasks: int | None = None,
    depends: Any = None,
    slurm_logs_dir: str | None = None,
):
    """A ready SlurmPipelineExecutor; ``.run()`` submits it (only the unfinished tasks on a relaunch)."""
    kwargs = slurm_executor_kwargs(
        site, job_name=job_name, logging_dir=logging_dir, tasks=tasks, slurm_logs_dir=slurm_logs_dir
    )
    if kwargs["partition"] is None:
        kwargs["partition"] = _default_partition()
    ex = SharedPathsSlurmExecutor(pipeline, depends=depends, **kwargs)
    ex.midtrain_site = site
    return ex


def _default_partition() -> str:
    """The cluster's default partition (sinfo marks it with '*'): datatrove needs a name."""
    import subprocess

    proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True)
    for line in proc.stdout.split():
        if line.endswith("*"):
            return line[:-1]
    raise LaunchError(
        "prep.partition: not set and the cluster has no default partition (sinfo shows none "
        "marked '*'); set prep.partition or partition in the site config"
    )
