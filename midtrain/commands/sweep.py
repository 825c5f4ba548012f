"""Run an ablation sweep: variants of a mixture and pack/train recipe through the fixed SFT probe.

A sweep recipe (`midtrain recipes --kind sweep`) names the start checkpoint, the token budget, the base pack
and train settings and the variants as deltas (sources left out, agent-trace share, repository file
ordering via a re-prep, midtraining length, context length). Each variant is packed (reusing the tokenized
caches), midtrained from the same start with the same budget and seed, then given the protocol's probe
(over its seeds) and proxy evals; the report ranks the variants against the no-midtraining baseline and
each other, marking a delta as a difference only beyond the seed noise. Runs here by default; --submit
sends afterok chains to Slurm. A rerun reuses finished variants and steps.
"""

from __future__ import annotations

import argparse
import sys

from midtrain.chains import Step, print_chains
from midtrain.config import ConfigError
from midtrain.launch.protocol_job import describe
from midtrain.launch.site import load_site
from midtrain.protocol import check_probe_layout
from recipes import resolve_config, resolve_probe

EPILOG = """examples:
  midtrain sweep sweep_demo                                   # CPU, demo scale (run `midtrain demo --only prep` first)
  midtrain sweep sweep_demo --dry-run                         # the steps of every chain, nothing run
  midtrain sweep sweep_demo --submit --site-set train.gpus_per_node=0 --dry-run   # the sbatch scripts
  midtrain sweep sweep_demo --report                          # rebuild the ranked report from finished runs
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="sweep recipe (see `midtrain recipes --kind sweep`)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="SweepConfig overrides")
    p.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only these chains (variant names or the baseline name)"
    )
    p.add_argument("--submit", action="store_true", help="submit afterok chains to Slurm instead of running here")
    p.add_argument("--site", metavar="PATH", help="site config for --submit (default: $MIDTRAIN_SITE)")
    p.add_argument("--site-set", action="append", default=[], metavar="KEY=VALUE", help="override a site field")
    p.add_argument("--dry-run", action="store_true", help="print the steps (with --submit: the scripts); run nothing")
    p.add_argument("--report", action="store_true", help="only write the report from what has finished")
    p.add_argument("--init-base", action="store_true", help=argparse.SUPPRESS)  # the setup job's step


def run(args: argparse.Namespace) -> int:
    # lazy: loads datatrove only when this runs
    from midtrain.sweep_config import SweepConfig

    cfg = resolve_config(args.recipe, SweepConfig, "sweep", args.overrides)
    # lazy: loads datatrove only when this runs
    from midtrain.sweep.plan import output_dir

    # how jobs rebuild this sweep (setup, report): the output pinned absolute, as the submitter resolved it
    self_argv = [args.recipe, *args.overrides, f"output={output_dir(cfg)}"]
    if args.init_base:
        # lazy: loads datatrove only when this runs
        from midtrain.sweep.run import init_base

        print(init_base(cfg))
        return 0
    if args.report:
        # lazy: loads datatrove, scipy, torch only when this runs
        from midtrain.sweep.primary import NullArmMismatch
        from midtrain.sweep.report import write_sweep_report

        try:
            print(write_sweep_report(cfg))
        except NullArmMismatch as e:
            print(f"midtrain sweep: {e}", file=sys.stderr)
            return 1
        return 0
    if args.submit:
        # lazy: loads datatrove only when this runs
        from midtrain.sweep.slurm import submit_sweep, sweep_jobs

        site = load_site(args.site, args.site_set)
        jobs = sweep_jobs(cfg, site, self_argv)
        if args.dry_run:
            try:
                check_probe_layout(cfg.protocol, site, resolve_probe(cfg.protocol))
            except ConfigError as e:
                print(f"midtrain sweep: warning: submitting would refuse this: {e}", file=sys.stderr)
            print(describe(jobs))
            return 0
        check_probe_layout(cfg.protocol, site, resolve_probe(cfg.protocol))  # every variant's probe is this one
        submit_sweep(cfg, jobs)
        for name, ids in jobs.job_ids.items():
            print(f"{name}: {' -> '.join(ids)}")
        print(f"report: {jobs.final_id}")
        if jobs.reused:
            print(f"complete, reused: {', '.join(jobs.reused)}")
        return 0
    if args.dry_run:
        # lazy: loads datatrove only when this runs
        from midtrain.sweep.plan import report_argv, setup_steps, sweep_chains

        print_chains(sweep_chains(cfg)[1], Step("report", report_argv(self_argv)), setup_steps(cfg, self_argv))
        return 0
    # lazy: loads datatrove only when this runs
    from midtrain.sweep.run import run_sweep

    return run_sweep(cfg, self_argv, args.runner, args.only)
