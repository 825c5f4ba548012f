"""The demo's shards on demand: `midtrain train` on a demo recipe builds them first where nothing exists yet."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from midtrain.demo.inputs import SAMPLES, project_repo
from midtrain.demo.stages import SOURCES, pack_stage, prep_stage
from midtrain.formats.shard_reader import MANIFEST
from recipes import all_recipes

log = logging.getLogger("midtrain.demo")

# The module defining the demo recipes (they train on the demo's own data).
DEMO_DATA_MODULE = "recipes.demo"


def build_demo_shards(shard_dir: str | Path) -> None:
    """Build the demo's shards at ``shard_dir`` (= WORKDIR/shards) from the embedded demo inputs."""

    workdir = Path(shard_dir).parent
    for stage in (prep_stage, pack_stage):
        log.info("building demo shards: %s(%s)", stage.__name__, workdir)
        stage(workdir)
    if not (Path(shard_dir) / MANIFEST).exists():
        raise FileNotFoundError(f"data.path: the demo stages ran but wrote no shards at {shard_dir}")


def is_demo_recipe(name: str) -> bool:
    """True for the recipes defined with the demo (recipes/demo.py): they train on the demo's own data."""

    r = all_recipes().get(name)
    return r is not None and getattr(r.fn, "__module__", "") == DEMO_DATA_MODULE


def _demo_made(d: Path) -> bool:
    """A directory under WORKDIR/prep that the demo wrote: its inputs folder, or a prep output of one of its
    sources whose inputs are all the demo's (the samples, WORKDIR/prep/_inputs, this checkout)."""
    import json

    if d.name == "_inputs":
        return True
    if d.name not in SOURCES or not d.is_dir():
        return False
    marker = d / "prep.json"
    if not marker.exists():
        return not any(d.iterdir())
    try:
        inputs = [Path(i) for i in json.loads(marker.read_text()).get("inputs", [])]
    except (OSError, ValueError, TypeError):
        return False
    repo = project_repo()
    ours = [SAMPLES.resolve(), (d.parent / "_inputs").resolve()]
    return all(i.resolve() == repo or any(i.resolve().is_relative_to(o) for o in ours) for i in inputs)


def check_nothing_there(shard_dir: str | Path) -> None:
    """Refuse to build the demo's data over or beside a user's: ``shard_dir`` must be missing or empty, and
    WORKDIR/prep (where the demo preps) may hold only what the demo itself wrote there."""
    path = Path(shard_dir)
    if path.is_dir() and any(path.iterdir()):
        raise FileNotFoundError(
            f"data.path: {path} holds files but no {MANIFEST} (an unfinished `midtrain pack`, or not a pack output); "
            f"finish it by rerunning its `midtrain pack` command, or give an empty or new data.path to build the "
            "demo's data there"
        )
    if path.exists() and not path.is_dir():
        raise FileNotFoundError(f"data.path: {path} is a file, not a `midtrain pack` output directory")
    prep = path.parent / "prep"
    foreign = sorted(str(d) for d in prep.iterdir() if not _demo_made(d)) if prep.is_dir() else []
    if foreign:
        raise FileNotFoundError(
            f"data.path: {path} has no {MANIFEST}, and building the demo's data there would prep into {prep} "
            f"beside data that is not the demo's ({', '.join(foreign)}); pack those with `midtrain pack`, or give "
            "a data.path in an empty directory"
        )


def ensure_demo_shards(cfg: Any, wait_s: float = 3600.0) -> None:
    """Before training a demo recipe: build the demo's shards at ``cfg.data.path`` when nothing is there.

    Other recipes are left alone (the trainer names a missing ``data.path``). A data.path holding files but no
    manifest, or one whose WORKDIR/prep holds prep outputs not made by the demo, is refused (never built over
    or mixed with a user's data). Under a multi-process launcher rank 0 builds; the others wait for the manifest.
    """
    path = Path(cfg.data.path)
    if (path / MANIFEST).exists() or not is_demo_recipe(cfg.name):
        return
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    if rank == 0:
        check_nothing_there(path)
        build_demo_shards(path)
        return
    deadline = time.time() + wait_s
    while not (path / MANIFEST).exists():
        if time.time() > deadline:
            raise FileNotFoundError(f"data.path: rank 0 did not finish building the demo shards at {path}")
        time.sleep(2.0)
