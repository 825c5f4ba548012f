"""Run directories: what a training run leaves on disk, and what the probe, evaluation and report read back.

Layout of a run directory ``RUN_DIR``::

    RUN_DIR/config.yaml                        the resolved training config
    RUN_DIR/metrics.jsonl                      one JSON object per step (``step``, ``loss``, ...)
    RUN_DIR/checkpoints/iter_0000020/          one checkpoint; complete when its ``complete.json`` lists
                                               every file with the size on disk

A protocol directory for one checkpoint holds ``sft/sft_result.json`` (the probe), ``proxy/proxy_results.json``
and ``swebench/swebench_results.json``.

A run that checkpointed on a preemption signal exits :data:`EXIT_REQUEUE` so the scheduler requeues it.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

EXIT_REQUEUE = 75  # "checkpointed, requeue me" (after SIGTERM / SIGUSR1); EX_TEMPFAIL in sysexits.h

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
MARKER = "complete.json"
_NAME = re.compile(r"^iter_(\d{7})$")

SFT_RESULT = "sft_result.json"
PROXY_RESULT = "proxy_results.json"
SWEBENCH_RESULT = "swebench_results.json"


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """A run's metrics.jsonl (PATH is the file or its run directory): one dict per step, in file order.

    A missing file gives []; lines that are not JSON objects with a ``step`` are skipped with a warning
    (a run killed mid-write leaves a partial last line).
    """
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            log.warning("%s:%d: not JSON, skipped", path, i)
            continue
        if isinstance(row, dict) and "step" in row:
            rows.append(row)
    return rows


def checkpoint_name(step: int) -> str:
    return f"iter_{step:07d}"


def verify(path: str | Path) -> str | None:
    """None when ``path`` is a complete checkpoint, else why it is not (missing marker, missing/truncated file)."""
    path = Path(path)
    marker = path / MARKER
    if not marker.is_file():
        return f"no {MARKER} (partial write)"
    try:
        meta = json.loads(marker.read_text())
        files = meta["files"]
    except (OSError, ValueError, KeyError) as e:
        return f"unreadable {MARKER}: {e}"
    for rel, size in files.items():
        f = path / rel
        if not f.is_file():
            return f"missing file {rel}"
        if f.stat().st_size != size:
            return f"{rel} has {f.stat().st_size} bytes, expected {size} (truncated or overwritten)"
    return None


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every ``iter_*`` directory under RUN_DIR/checkpoints, oldest first (not verified)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _NAME.match(p.name))]
    return sorted(found)


def valid_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, newest first; incomplete ones are logged and skipped."""
    out = []
    for step, path in reversed(list_checkpoints(run_dir)):
        problem = verify(path)
        if problem:
            log.warning("checkpoint %s is not usable: %s; trying an older one", path, problem)
            continue
        out.append((step, path))
    return out


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run directory (or ``run_dir`` itself if it is one), else None."""
    run_dir = Path(run_dir)
    if (run_dir / MARKER).is_file():
        return run_dir if verify(run_dir) is None else None
    valid = valid_checkpoints(run_dir)
    return valid[0][1] if valid else None


def latest_step(run_dir: str | Path) -> int | None:
    """The step of the run's newest complete checkpoint (as :func:`latest_checkpoint` finds it), else None."""
    done = latest_checkpoint(run_dir)
    m = _NAME.match(done.name) if done is not None else None
    return int(m.group(1)) if m else None


def finished(run_dir: str | Path, step: int) -> bool:
    """Whether the run's newest complete checkpoint is the one of ``step`` (its last step: nothing to train)."""
    return latest_step(run_dir) == step
