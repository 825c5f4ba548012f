"""Submit midtraining or the evaluation protocol to Slurm.

`submit train RECIPE [key=value ...]` resolves the recipe, renders an sbatch script from slurm/ (GPU:
one rank per GPU, NCCL; CPU when the site's train.gpus_per_node is 0: gloo), writes it with the resolved
config into RUN_DIR/slurm/, submits it and prints the job id and log path (one log per start of the job).
The job requeues itself when the trainer checkpoints on USR1 (sent signal_before_s before the time limit,
or at preemption) and resumes on restart. A relative run_dir is resolved against the site's workdir.

`submit protocol RECIPE [key=value ...]` submits, per checkpoint of the protocol recipe, the SFT probe
and each eval as an afterok chain, then the report after every chain; `--local` runs the same steps here.

Cluster specifics (partition, account, container image or venv, resources) come from the site config:
--site PATH or $MIDTRAIN_SITE (see slurm/site.example.yaml), changed per run with --site-set key=value.
Every value is checked and shell-quoted; the generated script is checked with `bash -n`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from midtrain.config import ConfigError
from midtrain.launch.protocol_job import StepJob, check_paths, describe, submit_jobs
from midtrain.launch.sbatch import submit
from midtrain.launch.shell import clean
from midtrain.launch.site import JobResources, SiteConfig, load_site
from midtrain.launch.train_job import build_train_job, resources_with
from midtrain.protocol import ProtocolConfig, check_submission, print_protocol, protocol_jobs, run_protocol
from recipes import load_train_config, resolve_config, resolve_probe

if TYPE_CHECKING:
    from midtrain.launch.train_job import TrainJob

EPILOG = """examples:
  midtrain submit train qwen3_8b_256k_h200 --site slurm/site.example.yaml --nodes 32 --dry-run
  midtrain submit train demo_tiny optim.train_steps=200 optim.global_batch_size=2 \\
      --site-set train.gpus_per_node=0 --tasks-per-node 2 --time 01:00:00
  midtrain submit protocol protocol_demo --site mysite.yaml
  midtrain submit protocol protocol_demo --local          # same steps, here, in order
"""


def _site_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--site", metavar="PATH", help="site config YAML (default: $MIDTRAIN_SITE, else built-in defaults)")
    p.add_argument(
        "--site-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a site config field, e.g. --site-set partition=long (repeatable)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the script(s), submit nothing, write nothing")
    p.add_argument("--print-config", action="store_true", help="print the resolved recipe config (YAML) and exit")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", metavar="WHAT", required=True)
    t = sub.add_parser(
        "train",
        help="submit a training run (requeues itself and resumes)",
        description="Render, write and submit the sbatch script of a training run.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument("recipe", help="train recipe (see `midtrain recipes --kind train`)")
    t.add_argument("overrides", nargs="*", metavar="key=value", help="recipe overrides (passed to the job as given)")
    t.add_argument("--nodes", type=int, help="nodes (default: site train.nodes)")
    t.add_argument("--gpus-per-node", type=int, help="GPUs per node; 0 = CPU job (default: site train.gpus_per_node)")
    t.add_argument("--tasks-per-node", type=int, help="ranks per node (default: one per GPU; 1 on CPU)")
    t.add_argument("--cpus-per-task", type=int, help="CPUs per rank (default: site train.cpus_per_task)")
    t.add_argument("--time", help="time limit, e.g. 04:00:00 (default: site train.time)")
    t.add_argument("--partition", help="partition (default: site train.partition or partition)")
    t.add_argument("--job-name", help="Slurm job name (default: mt-<run name>)")
    _site_args(t)
    t.set_defaults(_submit=_run_train)

    pr = sub.add_parser(
        "protocol",
        help="submit the SFT probe + evals per checkpoint as afterok chains",
        description="Submit a protocol recipe: per checkpoint, the SFT probe then each eval "
        "(afterok chain); the report after every chain.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pr.add_argument("recipe", help="protocol recipe (see `midtrain recipes --kind protocol`)")
    pr.add_argument("overrides", nargs="*", metavar="key=value", help="protocol overrides")
    pr.add_argument("--local", action="store_true", help="run the steps here, in order, instead of submitting")
    _site_args(pr)
    pr.set_defaults(_submit=_run_protocol)


def train_job(
    recipe: str,
    overrides: list[str],
    site: SiteConfig,
    resources: JobResources | None = None,
    job_name: str | None = None,
) -> TrainJob:
    """Resolve RECIPE (a train recipe or a run's config.yaml) + overrides and render its training job."""

    for i, item in enumerate(overrides):
        clean(item, f"override[{i}]")
    cfg = load_train_config(recipe, overrides)
    return build_train_job(cfg, site, resources, job_name=job_name)


def _warn(check) -> None:
    """A dry run shows the script even where submitting would refuse it: say so on stderr."""

    try:
        check()
    except ConfigError as e:
        print(f"midtrain submit: warning: submitting would refuse this: {e}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    return args._submit(args)


def _run_train(args: argparse.Namespace) -> int:

    if args.print_config:
        print(load_train_config(args.recipe, args.overrides).to_yaml(), end="")
        return 0
    site = load_site(args.site, args.site_set)
    res = resources_with(
        site.train,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        tasks_per_node=args.tasks_per_node,
        cpus_per_task=args.cpus_per_task,
        time=args.time,
        partition=args.partition,
    )
    job = train_job(args.recipe, args.overrides, site, res, job_name=args.job_name)
    if args.dry_run:
        _warn(job.check_paths)
        print(job.script, end="")
        return 0
    path = job.write()
    job_id = submit(path)
    kind = f"{res.gpus_per_node} GPUs" if res.gpus_per_node else "CPU"
    print(f"submitted job {job_id}: {job.job_name} ({res.nodes} node(s) x {res.ranks_per_node} ranks, {kind})")
    print(f"  script: {path}")
    print(f"  config: {job.slurm_dir / 'config.yaml'}")
    print(f"  log:    {job.log_path(job_id)}  (a requeued start writes {job.log_path(job_id, 1).name}, ...)")
    print(f"  run:    {job.run_dir}")
    print(f"  watch:  squeue -j {job_id}; tail -f {job.log_path(job_id)}")
    return 0


def _run_protocol(args: argparse.Namespace) -> int:

    cfg = resolve_config(args.recipe, ProtocolConfig, "protocol", args.overrides)
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return 0
    if args.local:
        return print_protocol(cfg) if args.dry_run else run_protocol(cfg, args.runner)

    site = load_site(args.site, args.site_set)
    jobs = protocol_jobs(cfg, site)
    if args.dry_run:
        _warn(lambda: check_paths(jobs))
        _warn(lambda: check_submission(cfg, site, resolve_probe(cfg)))
        print(describe(jobs))
        return 0
    check_submission(cfg, site, resolve_probe(cfg))
    submit_jobs(jobs)
    for name, jobs_of in jobs.chains.items():
        chain = [j for j in jobs_of if isinstance(j, StepJob)]
        assert len(chain) == len(jobs_of)  # a protocol's chains are step jobs (a sweep's also hold its TrainJob)
        ids = jobs.job_ids[name]
        print(f"{name}: " + " -> ".join(f"{j.step} {job_id}" for j, job_id in zip(chain, ids)))
        for j, job_id in zip(chain, ids):
            print(f"  {j.step:<14} log {j.log_path.replace('%j', job_id)}")
    if jobs.final:
        log_path = jobs.final.log_path.replace("%j", str(jobs.final_id))
        print(f"report: job {jobs.final_id} (after every chain) log {log_path}")
    sys.stdout.flush()
    return 0
