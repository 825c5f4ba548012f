"""Run a sweep here, step by step: setup, then each chain (baseline, variants) in order, then the report.

Every step is a `midtrain` command line run in this process (the same argv a Slurm job runs). Finished work
is reused on a rerun: a variant whose probe and evals are complete is skipped whole; inside a chain, a
finished training run (final checkpoint present) is skipped; prep and pack are no-ops for the same settings
(and refuse changed ones), and the probe and proxy evals skip themselves when their results match.
"""

from __future__ import annotations

import logging
from pathlib import Path

from midtrain.protocol import call_step, finish, run_chains
from midtrain.sweep.config import SweepConfig
from midtrain.sweep.plan import (base_checkpoint, check_stamp, complete, report_argv, setup_steps, sweep_chains)

log = logging.getLogger(__name__)


def init_base(cfg: SweepConfig) -> Path:
    """The train recipe's step-0 initialisation (its seed) as a checkpoint at OUTPUT/base."""
    from midtrain.train.initial_checkpoint import save_initial_checkpoint
    from midtrain.commands.train import load_config

    tcfg = load_config(cfg.train_recipe, [*cfg.train_overrides, f"seed={cfg.seed}"])
    return save_initial_checkpoint(tcfg, base_checkpoint(cfg))


def _finished(step: str, argv: list[str]) -> bool:
    """A training run at its final checkpoint is done. The other steps decide themselves: prep and pack
    resume or are no-ops for the same settings and refuse other settings; the probe and evals skip."""
    if step != "train":
        return False
    from midtrain.train.checkpoint import latest_checkpoint

    over = dict(a.split("=", 1) for a in argv if "=" in a)
    done = latest_checkpoint(over["run_dir"])
    return done is not None and done.name == f"iter_{int(over['optim.train_steps']):07d}"


def run_sweep(cfg: SweepConfig, self_argv: list[str], only: list[str] | None = None) -> int:
    """Setup, every chain (or only the named ones), then the report. Returns 0 when every step succeeded."""
    plans, chains = sweep_chains(cfg)
    for plan in plans.values():
        check_stamp(plan, write=True)
    for step, argv in setup_steps(cfg, self_argv):
        if step == "init_base":
            log.info("sweep: base checkpoint %s", init_base(cfg))
            continue
        if call_step("sweep setup", step, argv) != 0:
            log.error("sweep: setup step %s failed; nothing else can run", step)
            return 1
    todo = {}
    for name, chain in chains.items():
        if only and name not in only:
            continue
        if complete(cfg, name):
            log.info("sweep %s: probe and evals complete; reused", name)
            continue
        todo[name] = chain
    return finish("sweep", run_chains("sweep", todo, finished=_finished), report_argv(self_argv))
