"""Run directories: what a training run leaves on disk, and what the probe, evaluation and report read back.

Layout of a run directory ``RUN_DIR``::

    RUN_DIR/config.yaml                        the resolved training config
    RUN_DIR/metrics.jsonl                      one JSON object per step (``step``, ``loss``, ...)
    RUN_DIR/checkpoints/iter_0000020/          one checkpoint; complete when its ``complete.json`` lists
                                               every file with the size on disk (and SHA-256): see
                                               midtrain.formats.checkpoints

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


def step_of(checkpoint: str | Path) -> int | None:
    """The step of a ``iter_NNNNNNN`` checkpoint directory, else None."""
    m = _NAME.match(Path(checkpoint).name)
    return int(m.group(1)) if m else None


def run_dir_of(path: str | Path) -> Path:
    """The run directory of PATH: RUN for RUN/checkpoints/iter_NNNNNNN, else PATH itself (a run directory, or a
    checkpoint directory kept elsewhere: its own). Only the layout decides; the caller checks what it needs there."""
    path = Path(path)
    if step_of(path) is not None and path.parent.name == CHECKPOINTS:
        return path.parent.parent
    return path


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every ``iter_*`` directory under RUN_DIR/checkpoints, oldest first (not verified: whether
    one is complete, and the newest complete one, are midtrain.formats.checkpoints')."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _NAME.match(p.name))]
    return sorted(found)
