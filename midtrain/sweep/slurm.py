"""A sweep on Slurm with the protocol's submit machinery: a setup chain, then per variant an afterok chain
(re-prep, pack, training job, probe, evals), the baseline's chain, and the report after every chain.

Step jobs come from slurm/step.sbatch (:func:`midtrain.launch.protocol_job.render_step`), the training job
from the train templates (:func:`midtrain.commands.submit.train_job`: requeues and resumes itself).
Variants whose probe and evals are complete are not submitted again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from midtrain.launch.protocol_job import ProtocolJobs, StepJob, render_step, write_jobs
from midtrain.launch.sbatch import submit, submit_chain
from midtrain.launch.site import SiteConfig
from midtrain.sweep.config import SweepConfig
from midtrain.sweep.plan import check_stamp, complete, output_dir, report_argv, setup_steps, sweep_chains


@dataclass
class SweepJobs:
    setup: list[StepJob]
    chains: dict[str, list]  # name -> [StepJob | TrainJob]
    report: StepJob
    reused: list[str] = field(default_factory=list)  # complete variants, not submitted
    job_ids: dict[str, list[str]] = field(default_factory=dict)


def sweep_jobs(cfg: SweepConfig, site: SiteConfig, self_argv: list[str]) -> SweepJobs:
    from midtrain.commands.submit import train_job

    slurm_dir = output_dir(cfg) / "slurm"
    prefix = f"mt-{cfg.name}"
    plans, chains = sweep_chains(cfg)
    setup = [render_step(site, slurm_dir, "setup", s, a, prefix) for s, a in setup_steps(cfg, self_argv)]
    jobs: dict[str, list] = {}
    reused = []
    for name, chain in chains.items():
        if complete(cfg, name):
            reused.append(name)
            continue
        jobs[name] = [train_job(argv[1], argv[2:], site, job_name=f"{prefix}-{name}-train")
                      if step == "train" else render_step(site, slurm_dir, name, step, argv, prefix)
                      for step, argv in chain]
    report = render_step(site, slurm_dir, "", "report", report_argv(self_argv), prefix)
    return SweepJobs(setup, jobs, report, reused)


def _path(job) -> Path:
    return job.script_path


def submit_sweep(cfg: SweepConfig, jobs: SweepJobs) -> SweepJobs:
    """Write every script, then submit: setup chain; each chain afterok on setup; the report afterany."""
    plans, _ = sweep_chains(cfg)
    for plan in plans.values():
        check_stamp(plan, write=True)
    steps = [j for j in jobs.setup] + [j for c in jobs.chains.values() for j in c if isinstance(j, StepJob)]
    write_jobs(ProtocolJobs({"all": steps}, jobs.report))
    for chain in jobs.chains.values():
        for j in chain:
            if not isinstance(j, StepJob):
                j.write()
    setup_ids = submit_chain([_path(j) for j in jobs.setup])
    jobs.job_ids["setup"] = setup_ids
    for name, chain in jobs.chains.items():
        jobs.job_ids[name] = submit_chain([_path(j) for j in chain], after=setup_ids[-1:] or None)
    lasts = [ids[-1] for ids in jobs.job_ids.values() if ids]
    jobs.job_ids["report"] = [submit(_path(jobs.report), after=lasts, dependency="afterany")]
    return jobs


def describe(jobs: SweepJobs) -> str:
    """The dry run: every script in submission order with its dependency."""
    parts = []
    for i, j in enumerate(jobs.setup):
        parts.append(f"### {j.script_path}" + (f"  (afterok: {jobs.setup[i - 1].step})" if i else ""))
        parts.append(j.script)
    for name, chain in jobs.chains.items():
        for i, j in enumerate(chain):
            dep = "setup" if i == 0 else getattr(chain[i - 1], "step", "train")
            parts.append(f"### {_path(j)}  ({name}, afterok: {dep})")
            parts.append(j.script)
    parts.append(f"### {jobs.report.script_path}  (afterany: every chain)")
    parts.append(jobs.report.script)
    if jobs.reused:
        parts.append(f"### complete, not submitted again: {', '.join(jobs.reused)}")
    return "\n".join(parts)
