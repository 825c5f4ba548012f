"""The instances a SWE-bench unit asks its agent for, SWE-bench Pro's rows as the agent reads them, and
mini-swe-agent's predictions as the harness reads them."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from midtrain.eval.predictions import complete_predictions, write_predictions

log = logging.getLogger(__name__)

PRO_IMAGE_REPO = "jefzda/sweap-images"  # Scale's public per-instance images (dockerhub_tag column)


def slice_rows(rows: list[Any], spec: str) -> list[Any]:
    """``start:stop`` as mini-swe-agent's --slice (and SWE-agent's slice) takes it; '' or ':' = all."""
    if not spec or spec == ":":
        return rows
    try:
        return rows[slice(*[int(x) if x else None for x in spec.split(":")])]
    except (ValueError, TypeError):
        raise ValueError(f"instance_slice={spec!r}: expected START:STOP (e.g. 0:20)") from None


def write_instances(rows: list[dict[str, Any]], spec: str, out: str | Path) -> int:
    """The ids of the instances an agent is asked to run (ROWS sliced as the agent slices them) -> OUT."""
    ids = [r["instance_id"] for r in slice_rows(rows, spec)]
    Path(out).write_text("".join(f"{i}\n" for i in ids))
    return len(ids)


def convert_predictions(
    preds_json: str | Path, out_jsonl: str | Path, instances: list[str] | None = None
) -> dict[str, int]:
    """mini-swe-agent's preds.json ({id: prediction}) -> the harness's JSONL (one prediction per line).

    Instances the agent failed on keep an empty patch (the harness counts them as empty, not as missing); with
    ``instances`` (the ids asked for), each one without a prediction gets an empty patch too, and an agent that
    crashed before writing preds.json leaves every instance empty.
    """
    counts = {"predictions": 0, "empty_patch": 0, "dropped_no_instance_id": 0}
    if not Path(preds_json).exists() and instances is not None:
        log.warning("predictions: %s does not exist (the agent wrote none)", preds_json)
        data: Any = {}
    else:
        data = json.loads(Path(preds_json).read_text())
    rows = []
    for row in list(data.values()) if isinstance(data, dict) else data:
        if not isinstance(row, dict) or not row.get("instance_id"):
            counts["dropped_no_instance_id"] += 1
            log.warning("predictions %s: dropped an entry without instance_id: %.80r", preds_json, row)
            continue
        rows.append(
            {
                "instance_id": row["instance_id"],
                "model_name_or_path": row.get("model_name_or_path") or "midtrain",
                "model_patch": row.get("model_patch") or "",
            }
        )
    return write_predictions(complete_predictions(rows, instances, counts), out_jsonl, counts)


def pro_problem_statement(row: dict[str, Any]) -> str:
    """The task text Scale's harness gives the agent (helper_code/create_problem_statement.py): the issue, then
    the requirements and the new interfaces the hidden tests call; published Pro scores are with both."""
    missing = [k for k in ("problem_statement", "requirements", "interface") if k not in row]
    if missing:
        raise ValueError(f"SWE-bench Pro instance {row.get('instance_id', '?')}: no {missing} field")
    return (
        f"{row['problem_statement']}\n\nRequirements:\n{row['requirements']}\n\n"
        f"New interfaces introduced:\n{row['interface']}"
    )


def write_pro_rows(rows: list[dict[str, Any]], out_dir: str | Path, split: str) -> int:
    """SWE-bench Pro rows -> OUT_DIR/SPLIT.jsonl as mini-swe-agent reads them: `image_name` from dockerhub_tag
    and `problem_statement` as Scale's harness builds it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{split}.jsonl", "w") as f:
        for row in rows:
            row = dict(row)
            row.setdefault("image_name", f"{PRO_IMAGE_REPO}:{row['dockerhub_tag']}")
            row["problem_statement"] = pro_problem_statement(row)
            f.write(json.dumps(row) + "\n")
    return len(rows)
