"""The evaluation protocol on Slurm: one afterok chain per checkpoint (SFT probe, then each eval), then the report.

The caller (the application's ``submit protocol``) passes, per checkpoint, the ordered ``(step, argv)``
commands (the protocol's ``protocol_steps``); each becomes one job from slurm/step.sbatch with that step's
resources from the site config. A failed step cancels the rest of its chain; the report runs after every chain has ended
(afterany), comparing whatever finished. Scripts and logs go under OUTPUT/slurm/.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from midtrain.launch.render import check_cpus, job_body, render, sbatch_lines
from midtrain.launch.sbatch import submit, submit_chain
from midtrain.launch.shell import LaunchError, directive, qargv
from midtrain.launch.site import SiteConfig
from midtrain.launch.train_job import TrainJob

log = logging.getLogger(__name__)

# Steps that run one process per node, whatever GPUs their job holds (an eval drives its GPU(s) itself, the
# report is a CPU job): srun starts one task on each node. With one rank per GPU (a site entry giving only
# gpus_per_node, or the `default` entry) two ranks would export the same HF model and write the same
# results. Every other step (sft: the probe trains) takes its resources' ranks per node.
SINGLE_PROCESS_STEPS = frozenset({"eval_proxy", "eval_lm_eval", "eval_swebench", "report"})


@dataclass
class StepJob:
    chain: str
    step: str
    argv: list[str]
    script_path: Path
    log_path: str  # the first start's log, with %j (a requeued start writes ..._1.out, ...)
    script: str
    site: SiteConfig | None = None


@dataclass
class ProtocolJobs:
    """Chains of jobs (the protocol's per checkpoint, a sweep's per variant), submitted afterok each."""

    chains: dict[str, list[StepJob | TrainJob]]  # a sweep's variant chain holds its training job
    final: StepJob | None = None  # after every chain (the report)
    setup: list[StepJob] = field(default_factory=list)  # a chain every other chain waits for (a sweep's)
    reused: list[str] = field(default_factory=list)  # chains whose work is complete: not submitted again
    job_ids: dict[str, list[str]] = field(default_factory=dict)
    final_id: str | None = None

    def all_jobs(self) -> list[StepJob | TrainJob]:
        return [
            *self.setup,
            *(j for chain in self.chains.values() for j in chain),
            *([self.final] if self.final else []),
        ]


def render_step(
    site: SiteConfig, slurm_dir: Path, chain: str, step: str, argv: list[str], job_prefix: str = "mt"
) -> StepJob:
    """One step's job script (written by :func:`write_jobs`, not here)."""
    # a step repeated per seed ("sft-s7") takes its step's resources ("sft")
    kind = step if step in site.protocol or step in SINGLE_PROCESS_STEPS else step.split("-s")[0]
    res = site.step_resources(kind)
    if kind in SINGLE_PROCESS_STEPS:
        own = site.protocol.get(kind, {}).get("tasks_per_node")
        if own not in (None, 1):
            raise LaunchError(
                f"site protocol.{kind}.tasks_per_node: {own}, but step {kind} runs one process "
                "per node (it uses its job's GPUs itself); set 1 or leave it out"
            )
        res = res.replace(tasks_per_node=1)
    name = f"{job_prefix}-{chain}-{step}" if chain else f"{job_prefix}-{step}"
    base = f"{chain or 'all'}-{step}"
    check_cpus(site, res, f"protocol step {base}")
    logs = slurm_dir / "logs"
    values = {
        "sbatch": sbatch_lines(
            site, res, job_name=name, log_file=str(logs / f"{base}-%j.out"), gpu=res.gpus_per_node > 0, requeue=True
        ),
        **job_body(
            site,
            res,
            argv=qargv(argv, f"{chain}/{step} argv"),
            log_file=str(logs / base),
            status_dir=str(slurm_dir / "status" / base),
            mounts=[str(slurm_dir.parent)],
        ),
        # names also appear in comments and an echo: plain characters only
        "step": directive(step, "step name"),
        "chain": directive(chain or "all", "checkpoint name"),
    }
    script = render("step.sbatch", values, what=f"step {chain}/{step}")
    path = slurm_dir / f"{base}.sbatch"
    return StepJob(chain, step, list(argv), path, str(logs / f"{base}-%j_0.out"), script, site)


def build_chains(
    site: SiteConfig,
    slurm_dir: Path,
    steps: dict[str, list[tuple[str, list[str]]]],
    final: tuple[str, list[str]] | None = None,
    job_prefix: str = "mt",
) -> ProtocolJobs:
    """Render every step: ``steps`` per checkpoint, as the protocol's ``protocol_steps`` gives them, ``final``
    after all chains."""
    chains: dict[str, list[StepJob | TrainJob]] = {
        name: [render_step(site, slurm_dir, name, step, argv, job_prefix) for step, argv in chain]
        for name, chain in steps.items()
    }
    last = render_step(site, slurm_dir, "", final[0], final[1], job_prefix) if final else None
    return ProtocolJobs(chains, last)


def check_paths(jobs: ProtocolJobs) -> None:
    """Refuse node-local paths (compute nodes would not see the scripts and outputs there)."""
    for job in jobs.all_jobs():
        if isinstance(job, StepJob) and job.site is not None:
            job.site.check_shared({"protocol output": job.script_path.parent, "workdir": job.site.job_workdir()})
        elif isinstance(job, TrainJob):
            job.check_paths()


def write_jobs(jobs: ProtocolJobs) -> None:
    """Write every script (after :func:`check_paths`); a training job also writes its config and site."""
    check_paths(jobs)
    for job in jobs.all_jobs():
        if isinstance(job, TrainJob):
            job.write()
            continue
        job.script_path.parent.mkdir(parents=True, exist_ok=True)
        (job.script_path.parent / "logs").mkdir(exist_ok=True)
        job.script_path.write_text(job.script)


def submit_jobs(jobs: ProtocolJobs) -> ProtocolJobs:
    """Write and submit: the setup chain, each chain afterok (on the setup's last job), then the final step
    afterany on every chain's last job."""
    write_jobs(jobs)
    setup_ids = submit_chain([j.script_path for j in jobs.setup]) if jobs.setup else []
    if setup_ids:
        jobs.job_ids["setup"] = setup_ids
    for name, chain in jobs.chains.items():
        jobs.job_ids[name] = submit_chain([j.script_path for j in chain], after=setup_ids[-1:] or None)
    if jobs.final:
        lasts = [ids[-1] for ids in jobs.job_ids.values() if ids]
        jobs.final_id = submit(jobs.final.script_path, after=lasts or None, dependency="afterany")
    return jobs


def describe(jobs: ProtocolJobs) -> str:
    """The dry run: every script in submission order, each with the job it waits for."""
    parts = []
    for i, j in enumerate(jobs.setup):
        parts += [f"### {j.script_path}" + (f"  (setup, afterok: {jobs.setup[i - 1].step})" if i else ""), j.script]
    for name, chain in jobs.chains.items():
        for i, job in enumerate(chain):
            dep = _step_name(chain[i - 1]) if i else ("setup" if jobs.setup else "")
            parts += [f"### {job.script_path}" + (f"  ({name}, afterok: {dep})" if dep else ""), job.script]
    if jobs.final:
        parts += [f"### {jobs.final.script_path}  (afterany: every chain)", jobs.final.script]
    if jobs.reused:
        parts.append(f"### complete, not submitted again: {', '.join(jobs.reused)}")
    return "\n".join(parts)


def _step_name(job: StepJob | TrainJob) -> str:
    return job.step if isinstance(job, StepJob) else "train"
