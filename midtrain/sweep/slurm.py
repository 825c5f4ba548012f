"""A sweep on Slurm with the protocol's submit machinery: a setup chain, then per variant an afterok chain
(re-prep, pack, training job, probe, evals), the baseline's chain, and the report after every chain.

Step jobs come from slurm/step.sbatch (:func:`midtrain.launch.protocol_job.render_step`), the training job
from the train templates (:func:`midtrain.launch.train_job.build_train_job`: requeues and resumes itself).
Variants whose probe and evals are complete are not submitted again.
"""

from __future__ import annotations

from midtrain.launch.protocol_job import ProtocolJobs, StepJob, render_step, submit_jobs
from midtrain.launch.site import SiteConfig
from midtrain.launch.train_job import TrainJob, build_train_job
from midtrain.sweep.plan import check_stamp, complete, output_dir, report_argv, setup_steps, sweep_chains
from midtrain.sweep_config import SweepConfig


def sweep_jobs(cfg: SweepConfig, site: SiteConfig, self_argv: list[str]) -> ProtocolJobs:
    """Every job of the sweep, rendered (nothing written): setup, the chains not yet complete, the report."""
    slurm_dir = output_dir(cfg) / "slurm"
    prefix = f"mt-{cfg.name}"
    plans, chains = sweep_chains(cfg)
    setup = [render_step(site, slurm_dir, "setup", s.name, s.argv, prefix) for s in setup_steps(cfg, self_argv)]
    jobs: dict[str, list[StepJob | TrainJob]] = {}
    reused = []
    for name, chain in chains.items():
        if complete(cfg, name):
            reused.append(name)
            continue
        jobs[name] = [
            build_train_job(
                plans[name].train_config(),
                site,
                job_name=f"{prefix}-{name}-train",
            )
            if step.name == "train"
            else render_step(site, slurm_dir, name, step.name, step.argv, prefix)
            for step in chain
        ]
    report = render_step(site, slurm_dir, "", "report", report_argv(self_argv), prefix)
    return ProtocolJobs(jobs, report, setup=setup, reused=reused)


def submit_sweep(cfg: SweepConfig, jobs: ProtocolJobs) -> ProtocolJobs:
    """Stamp each variant's directory, write every script, then submit: the setup chain; each chain afterok on
    the setup; the report afterany."""
    plans, _ = sweep_chains(cfg)
    for plan in plans.values():
        check_stamp(plan, write=True)
    return submit_jobs(jobs)
