"""Predictions in the `swebench` harness's JSONL, completed to the instances an agent was asked to run."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def read_instances(path: str | Path | None) -> list[str] | None:
    """The instance ids in INSTANCES (one a line), or None when there is no such file."""
    if path is None or not Path(path).is_file():
        return None
    return [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]


def complete_predictions(
    rows: list[dict[str, Any]], instances: list[str] | None, counts: dict[str, int]
) -> list[dict[str, Any]]:
    """Every instance asked for gets a prediction: one the agent never finished gets an empty patch (counted
    ``no_prediction``), so it is graded as unresolved instead of dropped from the denominator."""
    if instances is None:
        return rows
    have = {r["instance_id"] for r in rows}
    model = next((r["model_name_or_path"] for r in rows), "midtrain")
    missing = [i for i in instances if i not in have]
    counts["no_prediction"] = len(missing)
    if missing:
        log.warning(
            "predictions: %d of %d instances asked for have no prediction (empty patch), e.g. %s",
            len(missing),
            len(instances),
            missing[:3],
        )
    return rows + [{"instance_id": i, "model_name_or_path": model, "model_patch": ""} for i in missing]


def write_predictions(rows: list[dict[str, Any]], out_jsonl: str | Path, counts: dict[str, int]) -> dict[str, int]:
    with open(out_jsonl, "w") as f:
        for row in rows:
            counts["predictions"] += 1
            counts["empty_patch"] += not row["model_patch"].strip()
            f.write(json.dumps(row) + "\n")
    return counts
