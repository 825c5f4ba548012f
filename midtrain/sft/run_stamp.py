"""What a probe output directory measures, as a stamp (formats.outputs.make_stamp): made from the start
checkpoint's content, the trace documents' and the tokenizer's, with the probe's settings.

    {"made": "sft probe", "inputs": {"start": <content id>, "traces": [<content id>...], "tokenizer": ...},
     "config": {"from": <start path>, "probe_sha": ..., "data_sha": ...}, "notes": {"start_checkpoint": ...},
     "code": ...}

The start's path is compared too: the held-out check reads the start's run directory (its config.yaml names the
shards it trained on), so the same weights under another run directory are checked against other shards. The
checkpoint it resolved to is a note (its content is the input).

The probe claims OUTPUT with this stamp (formats.outputs, policy ``sft``: reuse, resume, or refuse another stamp
naming what differs unless ``--overwrite``), and sft_result.json carries it beside the flat fields its readers
take (from, start_id, probe_sha, data_sha, ...). A probe output of an older midtrain has no output.json but a
probe_run.json (its fields flat in older still): :func:`older_record` reads it as the record it stands for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from midtrain.formats.checkpoints import resolve_checkpoint
from midtrain.formats.outputs import COMPLETE, RUNNING, make_stamp
from midtrain.formats.rundir import SFT_RESULT
from midtrain.formats.stamp import NOTES, content_id, read_stamp

PROBE_STAMP = "probe_run.json"  # an older midtrain's record of the probe's stamp
PROBE = "sft probe"  # the stamp's ``made``
WORK = ("run", "hf", SFT_RESULT, PROBE_STAMP)  # what a probe leaves in OUTPUT (cleared by a redo)


def start_identity(start: Path) -> dict[str, str]:
    """The start checkpoint the probe loads: the path given, the checkpoint directory it resolves to, its content id."""

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
    return make_stamp(
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


def older_record(out: Path) -> dict[str, Any] | None:
    """The ledger record (formats.outputs.read_record's BEFORE) of a probe output an older midtrain left: its
    probe_run.json's stamp, complete when its sft_result.json finished (exit 0); None without one."""
    old = read_stamp(out / PROBE_STAMP)
    if old is None:
        return None
    done = (read_stamp(out / SFT_RESULT) or {}).get("exit_code") == 0
    return {"stamp": probe_stamp_of(old), "state": COMPLETE if done else RUNNING}
