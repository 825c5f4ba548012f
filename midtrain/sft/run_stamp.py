"""What a probe output directory measures: its start checkpoint (path and content id) and its settings hash.

A probe writes OUTPUT/probe_run.json before it trains. A later run into the same OUTPUT reuses the result or
resumes the training only when the start path, the start's content and the settings hashes all match;
otherwise it is refused, naming what differs, unless ``overwrite`` clears the old run first. A directory that
holds probe work but no stamp (written before stamps existed) is refused the same way: what it measured is
unknown.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PROBE_STAMP = "probe_run.json"
WORK = ("run", "hf", "sft_result.json")  # what a probe leaves in OUTPUT (cleared by overwrite)


class ProbeRunMismatch(ValueError):
    """OUTPUT holds a probe run from another start checkpoint or with other settings."""


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


def claim_output(out: Path, want: dict[str, Any], overwrite: bool = False) -> None:
    """Make OUTPUT a probe dir for WANT (start identity + settings hashes): check an earlier stamp, clear a
    mismatching run when ``overwrite``, else refuse naming the difference; then record WANT."""
    from midtrain.formats.stamp import stale_fields

    stamp = out / PROBE_STAMP
    old: dict[str, Any] | None = None
    if stamp.exists():
        old = json.loads(stamp.read_text())
    elif any((out / w).exists() for w in WORK):
        old = {}  # work from before stamps: what it measured is unknown
    if old is not None:
        diff = [f"{k}: recorded {old.get(k, '(none)')!r}, now {want[k]!r}" for k in stale_fields(old, want)]
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
