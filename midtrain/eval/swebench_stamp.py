"""Which run a SWE-bench output directory's outputs are of: the run written there last (pending until it
starts) and the claim at the start of run.sh that removes another checkpoint's or settings' outputs."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from midtrain.eval.config import SweBenchConfig
from midtrain.formats.stamp import read_stamp, stale_fields, stamp

log = logging.getLogger(__name__)

GENERATED = "generated.json"  # what write_run wrote: the scripts and configs claim_run keeps
RUN_STAMP = "swebench_stamp.json"  # the checkpoint content and settings OUTPUT's agent and grader outputs are for
RUN_WANT = "swebench_want.json"  # the stamp of the run write_run wrote last (run.sh's claim_run makes it RUN_STAMP)


def run_pending(output: str | Path) -> str | None:
    """Why OUTPUT's outputs are not those of the run written there last (a new run submitted, not started yet:
    what lies there is an earlier run's), or None."""
    out = Path(output)
    want, ran = read_stamp(out / RUN_WANT), read_stamp(out / RUN_STAMP)
    if want is None or ran is None:  # a local run (RUN_STAMP is all), or nothing has run there yet (pending)
        return None
    # the code is not compared: run.sh may run another install of midtrain (the site's) than the one that wrote it
    changed = [f for f in stale_fields(ran, want) if f != "code"]
    if changed:
        return f"the run written into {out} has not started: what lies there is of another run ({', '.join(changed)})"
    return None


def claim_run(output: str | Path, checkpoint: str | Path) -> list[str]:
    """At the start of run.sh: OUTPUT's outputs stand for the checkpoint content and settings its stamp records,
    else they are removed (returned) before anything runs. mini-swe-agent skips the instances already in
    preds.json, the swebench harness those with a report.json under the run id, Scale's Pro grader those with an
    _output.json: a rerun after a new midtraining run would report the old checkpoint's rates. A rerun on the
    same content keeps them, so a requeued job resumes."""
    out = Path(output)
    want = stamp(checkpoint, SweBenchConfig.from_yaml(out / "swebench_config.yaml").to_dict())
    try:
        old: dict[str, Any] | None = json.loads((out / RUN_STAMP).read_text())
    except (OSError, ValueError):
        old = None
    removed: list[str] = []
    if old is None or stale_fields(old, want):
        keep = set(json.loads((out / GENERATED).read_text())) | {RUN_STAMP}
        keep |= {str(d) for k in list(keep) for d in Path(k).parents}  # the directories that hold them
        for f in sorted(out.rglob("*"), key=lambda q: -len(q.parts)):
            rel = str(f.relative_to(out))
            if rel in keep or not f.exists():
                continue
            shutil.rmtree(f) if f.is_dir() else f.unlink()
            removed.append(rel)
        if removed:
            why = "no stamp" if old is None else ", ".join(stale_fields(old, want)) + " changed"
            log.warning(
                "swebench: %s held results of another checkpoint or settings (%s); removed %d outputs "
                "(e.g. %s) before this run",
                out,
                why,
                len(removed),
                ", ".join(removed[:3]),
            )
    (out / RUN_STAMP).write_text(json.dumps(want, indent=1))
    return removed
