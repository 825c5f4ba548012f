"""Run the whole flow on the embedded sample data, on CPU: prep -> curate -> pack -> train -> sft -> eval -> report.

Each stage writes under --workdir and is skipped on a rerun when its output is complete.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("midtrain.demo")

# (stage name, module providing `demo_stage(workdir: Path) -> str`) in flow order.
STAGES = [
    ("prep", "midtrain.sources.demo"),
    ("pack", "midtrain.pack.demo"),
    ("train", "midtrain.train.demo"),
    ("protocol", "midtrain.eval.demo"),
]


# `midtrain train` on one of these recipes builds the demo's shards first when data.path has none.
DEMO_DATA_MODULE = "recipes.demo"
_MANIFEST = "manifest.json"  # a finished `midtrain pack` output (midtrain.formats.shard_reader.MANIFEST)


def build_demo_shards(shard_dir: str | Path) -> None:
    """Build the demo's shards at ``shard_dir`` (= WORKDIR/shards) from the embedded demo inputs."""
    workdir = Path(shard_dir).parent
    for name, module_name in STAGES[:2]:  # prep, pack
        log.info("building demo shards: %s.demo_stage(%s)", module_name, workdir)
        importlib.import_module(module_name).demo_stage(workdir)
    if not (Path(shard_dir) / _MANIFEST).exists():
        raise FileNotFoundError(f"data.path: the demo stages ran but wrote no shards at {shard_dir}")


def is_demo_recipe(name: str) -> bool:
    """True for the recipes defined with the demo (recipes/demo.py): they train on the demo's own data."""
    from recipes import all_recipes

    r = all_recipes().get(name)
    return r is not None and getattr(r.fn, "__module__", "") == DEMO_DATA_MODULE


def ensure_demo_shards(cfg: Any, wait_s: float = 3600.0) -> None:
    """Before training a demo recipe: build the demo's shards at ``cfg.data.path`` when it holds none.

    Other recipes are left alone (the trainer names a missing ``data.path``). Under a multi-process launcher
    rank 0 builds; the others wait for the manifest.
    """
    path = Path(cfg.data.path)
    if (path / _MANIFEST).exists() or not is_demo_recipe(cfg.name):
        return
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    if rank == 0:
        build_demo_shards(path)
        return
    deadline = time.time() + wait_s
    while not (path / _MANIFEST).exists():
        if time.time() > deadline:
            raise FileNotFoundError(f"data.path: rank 0 did not finish building the demo shards at {path}")
        time.sleep(2.0)


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
