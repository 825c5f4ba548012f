"""Run the whole flow on the embedded sample data, on CPU: prep -> curate -> pack -> train -> sft -> eval -> report.

Each stage (:mod:`midtrain.demo.stages`) writes under --workdir and is skipped on a rerun when its output is
complete; the inputs are in :mod:`midtrain.demo.inputs`.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from midtrain.demo.stages import pack_stage, prep_stage, protocol_stage, train_stage

log = logging.getLogger("midtrain.demo")

# In flow order: each takes the workdir and returns its output path.
STAGES = {"prep": prep_stage, "pack": pack_stage, "train": train_stage, "protocol": protocol_stage}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", default=".demo", help="where every stage writes (default: .demo)")
    p.add_argument("--only", nargs="*", metavar="STAGE", help=f"run only these stages: {list(STAGES)}")


def run(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    last = None
    for i, (name, stage) in enumerate(STAGES.items(), 1):
        if args.only and name not in args.only:
            continue
        t0 = time.time()
        log.info("[%d/%d] %s ...", i, len(STAGES), name)
        last = stage(workdir)
        log.info("[%d/%d] %s done in %.1fs -> %s", i, len(STAGES), name, time.time() - t0, last)
    print(f"demo finished; last output: {last}")
    return 0
