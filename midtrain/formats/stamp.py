"""Whether a finished result still stands for what it claims to measure: one stamp for every step that reuses one.

A stamp says what was scored (the path given, the checkpoint it resolved to, and a content id of that checkpoint's
files) and with which settings. The probe, the proxy, lm-eval, the local agent run and the cluster SWE-bench run
write it beside their result and reuse the result only when a fresh stamp equals it; a path alone is not enough,
because a run directory names a newer checkpoint after more training (iter_10's numbers were reported for iter_12).

The content id of a midtrain checkpoint is built from the SHA-256s its ``complete.json`` records (the ones resume
and :func:`midtrain.train.checkpoint.verify_checkpoint` check), so no checkpoint is read again; any other directory
(an HF export) is hashed file by file, large files by a content sample.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from midtrain.formats.rundir import MARKER, latest_checkpoint

log = logging.getLogger(__name__)

_WHOLE_FILE = 64 << 20  # files up to this size are hashed whole
_BLOCK, _BLOCKS = 1 << 20, 16  # larger ones: their size and 16 evenly spaced 1 MiB blocks


def _file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size <= _WHOLE_FILE:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
        else:  # a content sample: re-reading an 8B checkpoint whole on every requeue costs minutes
            h.update(str(size).encode())
            for i in range(_BLOCKS):
                fh.seek((size - _BLOCK) * i // (_BLOCKS - 1))
                h.update(fh.read(_BLOCK))
    return h.hexdigest()


def content_id(path: str | Path) -> str:
    """A digest of what a checkpoint, export or data file holds, independent of where it lies: a midtrain
    checkpoint's recorded per-file SHA-256s, else every file's relative name, size and bytes (hidden files aside)."""
    root = Path(path)
    h = hashlib.blake2b(digest_size=12)
    if root.is_file():
        h.update(f"{root.stat().st_size}\0{_file_digest(root)}".encode())
        return h.hexdigest()
    try:
        recorded = json.loads((root / MARKER).read_text()).get("sha256") or {}
    except (OSError, ValueError):
        recorded = {}
    if recorded:
        for rel, sha in sorted(recorded.items()):
            h.update(f"{rel}\0sha256:{sha}\n".encode())
        return h.hexdigest()
    for f in sorted(
        p for p in root.rglob("*") if p.is_file() and not any(s.startswith(".") for s in p.relative_to(root).parts)
    ):
        rel = f.relative_to(root).as_posix()
        h.update(f"{rel}\0{f.stat().st_size}\0{_file_digest(f)}\n".encode())
    return h.hexdigest()


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


def stamp(checkpoint: str | Path, config: dict[str, Any], **inputs: str | Path | None) -> dict[str, Any]:
    """The stamp of a result: the checkpoint given, the one it resolves to and its content id, the settings,
    and the content id of each other input named (data, tokenizer; None is recorded as None)."""
    scored = resolve_checkpoint(checkpoint)
    out: dict[str, Any] = {
        "checkpoint": str(checkpoint),
        "scored_checkpoint": str(scored),
        "content": content_id(scored),
        "config": config,
    }
    for name, p in inputs.items():
        out[f"{name}_content"] = None if p is None else content_id(p)
    return out


def stale_fields(old: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """The stamp fields in which an earlier result differs from what would be made now (empty: it still stands)."""
    return [k for k in want if old.get(k) != want[k]]


def reusable_result(path: str | Path, want: dict[str, Any]) -> dict[str, Any] | None:
    """The result file at PATH when its stamp (the :func:`stamp` keys it holds) equals WANT, else None; a stale
    one is logged with what changed, and redone by the caller."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        log.warning("%s is unreadable; redone", path)
        return None
    diff = stale_fields(old, want)
    if not diff:
        log.info("%s is complete for this checkpoint's content and config; skipped", path)
        return old
    log.info("%s is stale (%s changed since it was written); redone", path, ", ".join(diff))
    return None
