"""The demo's shards on demand: `midtrain train` on a demo recipe builds them first when data.path has none."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from midtrain.formats.shard_reader import MANIFEST

log = logging.getLogger("midtrain.demo")

# The module defining the demo recipes (they train on the demo's own data).
DEMO_DATA_MODULE = "recipes.demo"


def build_demo_shards(shard_dir: str | Path) -> None:
    """Build the demo's shards at ``shard_dir`` (= WORKDIR/shards) from the embedded demo inputs."""
    from midtrain.demo.stages import pack_stage, prep_stage

    workdir = Path(shard_dir).parent
    for stage in (prep_stage, pack_stage):
        log.info("building demo shards: %s(%s)", stage.__name__, workdir)
        stage(workdir)
    if not (Path(shard_dir) / MANIFEST).exists():
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
    if (path / MANIFEST).exists() or not is_demo_recipe(cfg.name):
        return
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    if rank == 0:
        build_demo_shards(path)
        return
    deadline = time.time() + wait_s
    while not (path / MANIFEST).exists():
        if time.time() > deadline:
            raise FileNotFoundError(f"data.path: rank 0 did not finish building the demo shards at {path}")
        time.sleep(2.0)
