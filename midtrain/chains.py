"""Chains of `midtrain` steps run here, in order: the protocol's and the sweep's local runner and dry run.

A :class:`Step` is one command line (what follows ``midtrain``), the argv its Slurm job runs
(midtrain/launch/protocol_job.py renders those); ``done`` says when its work is already there, so a rerun
reuses it instead of parsing the argv back. A failed step skips the rest of its chain, never the others.
The command that starts a flow hands it a :data:`Runner` (the CLI's ``main``), so flows never import the CLI.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Step:
    name: str
    argv: list[str]  # what follows `midtrain` on the command line
    done: Callable[[], bool] | None = None  # True: the step's work is already there (the local run skips it)

    def command(self) -> str:
        return "midtrain " + " ".join(self.argv)


Chains = dict[str, list[Step]]  # chain name (a checkpoint, a variant) -> its steps in order
Runner = Callable[[list[str]], int]  # runs a `midtrain` command line in this process: the CLI's main


def run_step(owner: str, step: Step, runner: Runner) -> int:
    """Run one step's command line in this process (the argv its Slurm job would run); its exit code."""
    log.info("%s: %s: %s", owner, step.name, step.command())
    try:
        return runner(step.argv)
    except SystemExit as e:  # argparse rejected the argv
        return e.code if isinstance(e.code, int) else 2
    except Exception:
        log.exception("%s: step %s raised", owner, step.name)
        return 1


def run_chains(kind: str, chains: Chains, runner: Runner, only: list[str] | None = None) -> list[str]:
    """Run each chain's steps in order (or only the named chains); a failed step skips the rest of its chain.

    Returns the failed steps as `chain/step`. A step whose ``done()`` holds is reused, not run.
    """
    failed = []
    for name, chain in chains.items():
        if only and name not in only:
            continue
        for step in chain:
            if step.done is not None and step.done():
                log.info("%s %s: %s already finished; reused", kind, name, step.name)
                continue
            rc = run_step(f"{kind} {name}", step, runner)
            if rc != 0:
                log.error("%s %s: step %s failed (exit %d); skipping the rest of its chain", kind, name, step.name, rc)
                failed.append(f"{name}/{step.name}")
                break
    return failed


def finish(kind: str, failed: list[str], report: Step, runner: Runner) -> int:
    """The report step after every chain; 1 when a step failed, else the report's exit code."""
    rc = run_step(kind, report, runner)
    if failed:
        log.error("%s: failed steps: %s", kind, ", ".join(failed))
        return 1
    return rc


def print_chains(chains: Chains, report: Step, setup: list[Step] | None = None) -> None:
    """The local dry run: every step's command line in the order it would run, nothing run."""
    for step in setup or []:
        print(f"setup/{step.name}: {step.command()}")
    for name, chain in chains.items():
        for step in chain:
            print(f"{name}/{step.name}: {step.command()}")
    print(f"{report.name}: {report.command()}")
