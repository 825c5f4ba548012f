"""Finding and checking a run directory's checkpoints: pure reading of the layout the trainer writes
(formats.rundir: RUN_DIR/checkpoints/iter_*/ with its complete.json), for every reader (resume, export,
init_from, evaluation, the probe, the demo, sweeps).

:func:`checkpoint_problem` is whether one is complete (its marker, every file at its recorded size, and on request
its recorded SHA-256s: :func:`file_sha256`, the one hash of a checkpoint's files); :func:`latest_checkpoint` is the
newest complete one of a run directory; :func:`resolve_checkpoint` what a step reading a path scores.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Literal, overload

from midtrain.formats.rundir import CHECKPOINTS, MARKER, list_checkpoints, step_of

log = logging.getLogger(__name__)

# (checkpoint dir, file names relative to it) -> {name: SHA-256}; the trainer's hashes over its ranks in parallel
Checksums = Callable[[Path, list[str]], dict[str, str]]
# a checkpoint directory -> why it cannot be used, or None
Check = Callable[[Path], str | None]


class CheckpointError(RuntimeError):
    """A checkpoint, or every checkpoint of a run directory, cannot be used; the message says which and why."""


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of one file: what complete.json records for every file of a checkpoint."""
    with Path(path).open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def sha256_files(root: Path, names: list[str]) -> dict[str, str]:
    """{name: SHA-256} of files under ROOT, in this process (the trainer's ranks split the work instead)."""
    return {name: file_sha256(root / name) for name in names}


# -- checks ------------------------------------------------------------------------------------------------
def size_problem(path: str | Path) -> str | None:
    """None when PATH has its complete.json and every file it lists has the size recorded, else what is not."""
    path = Path(path)
    marker = path / MARKER
    if not marker.is_file():
        return f"no {MARKER} (partial write)"
    try:
        files = json.loads(marker.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable {MARKER}: {e}"
    for rel, size in files.items():
        f = path / rel
        if not f.is_file():
            return f"missing file {rel}"
        if f.stat().st_size != size:
            return f"{rel} has {f.stat().st_size} bytes, expected {size} (truncated or overwritten)"
    return None


def checksum_problem(path: str | Path, checksums: Checksums = sha256_files) -> str | None:
    """None when every file of the checkpoint has the SHA-256 its complete.json records, else what differs.
    A checkpoint written before checksums were recorded passes (its sizes are checked by :func:`size_problem`)."""
    path = Path(path)
    try:
        recorded = json.loads((path / MARKER).read_text()).get("sha256") or {}
    except (OSError, ValueError) as e:
        return f"unreadable {MARKER}: {e}"
    names = sorted(recorded)
    try:
        actual = checksums(path, names)
    except OSError as e:
        return f"cannot read: {e}"
    bad = [name for name in names if actual.get(name) != recorded[name]]
    if bad:
        return f"{path / bad[0]} does not have the SHA-256 recorded when it was written (content changed)" + (
            f", and {len(bad) - 1} more file(s)" if len(bad) > 1 else ""
        )
    return None


def checkpoint_problem(path: str | Path, checksums: Checksums | None = None) -> str | None:
    """Why a checkpoint cannot be used (no marker, a missing or cut file, and with CHECKSUMS a file whose
    SHA-256 differs from the recorded one), or None."""
    return size_problem(path) or (checksum_problem(path, checksums) if checksums is not None else None)


@overload
def latest_checkpoint(path: str | Path, check: Check = ..., *, required: Literal[True], then: str = "") -> Path: ...
@overload
def latest_checkpoint(path: str | Path, check: Check = ..., required: bool = False, then: str = "") -> Path | None: ...
def latest_checkpoint(
    path: str | Path, check: Check = size_problem, required: bool = False, then: str = ""
) -> Path | None:
    """The checkpoint a reader of PATH uses: PATH itself when it is a checkpoint (it has complete.json), else the
    newest ``checkpoints/iter_*`` of the run directory PATH that passes CHECK (by default: complete, every file
    at its recorded size; resume passes the SHA-256 check too), newer unusable ones logged and skipped.

    None when there is none; with ``required`` a :class:`CheckpointError` instead, naming each checkpoint found
    and why it is unusable, then THEN (what to do)."""
    path = Path(path)
    if (path / MARKER).is_file():
        problem = check(path)
        if problem is None:
            return path
        if required:
            raise CheckpointError(
                f"checkpoint {path} is damaged: {problem}; "
                + (then or f"restore it, or name an older {CHECKPOINTS}/iter_* directory")
            )
        return None
    found = list_checkpoints(path)
    damaged: list[str] = []
    for _, ckpt in reversed(found):
        problem = check(ckpt)
        if problem is None:
            return ckpt
        log.warning("checkpoint %s is not usable: %s; trying an older one", ckpt, problem)
        damaged.append(f"{ckpt.name}: {problem}")
    if not required:
        return None
    if not found:
        raise CheckpointError(f"{path}: no midtrain checkpoint (expected {path}/{CHECKPOINTS}/iter_*/ with {MARKER})")
    raise CheckpointError(
        f"{path / CHECKPOINTS}: none of its {len(found)} checkpoint(s) is complete ({'; '.join(damaged)}). "
        + (then or "Restore them, or name a complete checkpoint")
    )


def resolve_checkpoint(path: str | Path) -> Path:
    """What a step reading PATH scores: an HF directory or a checkpoint as given, a run directory's newest
    complete checkpoint; FileNotFoundError when there is none."""
    path = Path(path)
    if (path / "config.json").is_file() or (path / MARKER).is_file() or path.is_file():
        return path
    ckpt = latest_checkpoint(path)
    if ckpt is None:
        raise FileNotFoundError(f"{path}: no complete midtrain checkpoint (and no config.json: not HF)")
    return ckpt


def latest_step(run_dir: str | Path) -> int | None:
    """The step of the run's newest complete checkpoint (as :func:`latest_checkpoint` finds it), else None."""
    done = latest_checkpoint(run_dir)
    return step_of(done) if done is not None else None
