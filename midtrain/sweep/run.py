"""Run a sweep here, step by step: setup, then each chain (baseline, variants) in order, then the report.

Every step is a `midtrain` command line run in this process (the same argv a Slurm job runs). Finished work
is reused on a rerun: a variant whose probe and evals are complete is skipped whole; inside a chain, a
finished training run (final checkpoint present) is skipped; prep and pack are no-ops for the same settings
(and refuse changed ones), and the probe and proxy evals skip themselves when their results match.
"""

from __future__ import annotations

import logging
from pathlib import Path

from midtrain.chains import Runner, Step, finish, run_chains, run_step
from midtrain.sweep.plan import base_checkpoint, check_stamp, complete, report_argv, setup_steps, sweep_chains
from midtrain.sweep_config import SweepConfig
from midtrain.train.initial_checkpoint import save_initial_checkpoint
from recipes import load_train_config

log = logging.getLogger(__name__)


def init_base(cfg: SweepConfig) -> Path:
    """The train recipe's step-0 initialisation (its seed) as a checkpoint at OUTPUT/base."""

    tcfg = load_train_config(cfg.train_recipe, [*cfg.train_overrides, f"seed={cfg.seed}"])
    return save_initial_checkpoint(tcfg, base_checkpoint(cfg))


def run_sweep(cfg: SweepConfig, self_argv: list[str], runner: Runner, only: list[str] | None = None) -> int:
    """Setup, every chain (or only the named ones), then the report, each step run by RUNNER (the CLI's main).
    Returns 0 when every step succeeded."""
    plans, chains = sweep_chains(cfg)
    for plan in plans.values():
        check_stamp(plan, write=True)
    for step in setup_steps(cfg, self_argv):
        if step.name == "init_base":  # here, in this process: no need to resolve the sweep again
            log.info("sweep: base checkpoint %s", init_base(cfg))
            continue
        if run_step("sweep setup", step, runner) != 0:
            log.error("sweep: setup step %s failed; nothing else can run", step.name)
            return 1
    todo = {}
    for name, chain in chains.items():
        if only and name not in only:
            continue
        if complete(cfg, name):
            log.info("sweep %s: probe and evals complete; reused", name)
            continue
        todo[name] = chain
    return finish("sweep", run_chains("sweep", todo, runner), Step("report", report_argv(self_argv)), runner)
