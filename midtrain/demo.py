"""Run the whole flow on the embedded sample data, on CPU: prep -> curate -> pack -> train -> sft -> eval -> report.

Each stage writes under --workdir and is skipped on a rerun when its output is complete.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import time
from pathlib import Path

log = logging.getLogger("midtrain.demo")

# (stage name, module providing `demo_stage(workdir: Path) -> str`) in flow order.
STAGES = [
    ("prep", "midtrain.sources.demo"),
    ("pack", "midtrain.pack.demo"),
    ("train", "midtrain.train.demo"),
    ("protocol", "midtrain.eval.demo"),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", default=".demo", help="where every stage writes (default: .demo)")
    p.add_argument("--only", nargs="*", metavar="STAGE", help=f"run only these stages: {[s for s, _ in STAGES]}")


def run(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    last = None
    for i, (name, module_name) in enumerate(STAGES, 1):
        if args.only and name not in args.only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            log.warning("[%d/%d] %s: not built yet, skipped", i, len(STAGES), name)
            continue
        t0 = time.time()
        log.info("[%d/%d] %s ...", i, len(STAGES), name)
        last = module.demo_stage(workdir)
        log.info("[%d/%d] %s done in %.1fs -> %s", i, len(STAGES), name, time.time() - t0, last)
    print(f"demo finished; last output: {last}")
    return 0
