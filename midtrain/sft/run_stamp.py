"""What a probe output directory measures, as a stamp (midtrain.formats.stamp): made from the start checkpoint's
content, the trace documents' and the tokenizer's, with the probe's settings.

    {"made": "sft probe", "inputs": {"start": <content id>, "traces": [<content id>...], "tokenizer": ...},
     "config": {"from": <start path>, "probe_sha": ..., "data_sha": ...}, "notes": {"start_checkpoint": ...}}

The start's path is compared too: the held-out check reads the start's run directory (its config.yaml names the
shards it trained on), so the same weights under another run directory are checked against other shards. The
checkpoint it resolved to is a note (its content is the input).

A probe writes OUTPUT/probe_run.json before it trains, and the same stamp into sft_result.json (beside the flat
fields its readers take: from, start_id, probe_sha, data_sha, ...). A later run into the same OUTPUT reuses the
result or resumes the training only when the stamp it would write has no :func:`probe_changes`; otherwise it is
refused, naming what differs, unless ``overwrite`` clears the old run first. A directory that holds probe work
but no stamp (written before stamps existed) is refused the same way: what it measured is unknown. Records of an
older midtrain (the same fields at the top level) are still read (:func:`probe_stamp_of`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from midtrain.formats.outputs import OutputRefused
from midtrain.formats.stamp import NOTES, output_stamp, read_stamp, stale_details

log = logging.getLogger(__name__)

PROBE_STAMP = "probe_run.json"
PROBE = "sft probe"  # the stamp's ``made``
WORK = ("run", "hf", "sft_result.json")  # what a probe leaves in OUTPUT (cleared by overwrite)


class ProbeRunMismatch(OutputRefused):
    """OUTPUT holds a probe run from another start checkpoint or with other settings (a refusal: exit 3)."""


def start_identity(start: Path) -> dict[str, str]:
    """The start checkpoint the probe loads: the path given, the checkpoint directory it resolves to, its content id."""
    from midtrain.formats.stamp import content_id, resolve_checkpoint

    try:
        ckpt = resolve_checkpoint(start)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"--from {start}: no complete midtrain checkpoint (and no config.json: not HF)"
        ) from None
    return {"from": str(start), "start_checkpoint": str(ckpt), "start_id": content_id(ckpt)}


def probe_stamp(fields: dict[str, Any]) -> dict[str, Any]:
    """The stamp of a probe from its flat FIELDS (:func:`start_identity`, probe_sha, data_sha, data_content,
    tokenizer_content): the layout sft_result.json's readers take, and the one an older midtrain recorded."""
    return output_stamp(
        PROBE,
        {
            "start": fields.get("start_id"),
            "traces": fields.get("data_content"),
            "tokenizer": fields.get("tokenizer_content"),
        },
        {"from": fields.get("from"), "probe_sha": fields.get("probe_sha"), "data_sha": fields.get("data_sha")},
        notes={"start_checkpoint": fields.get("start_checkpoint")},
    )


def probe_stamp_of(record: dict[str, Any]) -> dict[str, Any]:
    """The stamp a probe_run.json or sft_result.json holds; one of an older midtrain (its fields flat, no
    ``made``) is converted, so an output that still stands is still reused (fields it lacks read as None and
    differ: stale, with the reason)."""
    if "made" in record:
        return {k: record[k] for k in ("made", "inputs", "config", NOTES) if k in record}
    return probe_stamp(record)


def probe_changes(record: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """What a recorded probe (a probe_run.json's or sft_result.json's content) differs in from WANT, as
    ``FIELD: recorded OLD, now NEW``; [] when it is the same probe. The one comparison of the probe's outputs."""
    return stale_details(probe_stamp_of(record), want)


def claim_output(out: Path, want: dict[str, Any], overwrite: bool = False) -> None:
    """Make OUTPUT a probe dir for WANT (:func:`probe_stamp`): check an earlier stamp, clear a mismatching run
    when ``overwrite``, else refuse naming the difference; then record WANT."""
    stamp = out / PROBE_STAMP
    diff: list[str] = []
    if stamp.exists():
        old = read_stamp(stamp)
        diff = probe_changes(old, want) if old is not None else [f"{PROBE_STAMP} is unreadable (cut short)"]
    elif any((out / w).exists() for w in WORK):  # work from before stamps: what it measured is unknown
        diff = [f"its work has no {PROBE_STAMP} (written before stamps: what it measured is unknown)"]
    if diff:
        if not overwrite:
            raise ProbeRunMismatch(
                f"--output {out} holds a probe run of another start or other settings ("
                + "; ".join(diff)
                + "); use another --output, or --overwrite to rerun it"
            )
        log.warning("SFT probe: %s held another probe run (%s); overwritten", out, "; ".join(diff))
        for w in WORK:
            p = out / w
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(f"{stamp.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(want, indent=2))
    tmp.replace(stamp)
