"""Which run a SWE-bench output directory's outputs are of: the run written there last (pending until it
starts) and the claim at the start of run.sh (formats.outputs, policy ``swebench``) that removes another
checkpoint's or settings' outputs."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from midtrain.eval.config import SweBenchConfig
from midtrain.formats.outputs import LEASE, RECORD, REDO, RUNNING, claim, write_json
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
    """At the start of run.sh: OUTPUT claimed for the checkpoint content and settings (formats.outputs, policy
    ``swebench``): outputs of another stamp are removed (returned) before anything runs. mini-swe-agent skips
    the instances already in preds.json, the swebench harness those with a report.json under the run id, Scale's
    Pro grader those with an _output.json: a rerun after a new midtraining run would report the old checkpoint's
    rates. A rerun of the same stamp keeps them, so a requeued job resumes. RUN_STAMP records the stamp for
    --collect and the report (an older midtrain's, without output.json, stands in for the ledger's record)."""
    out = Path(output)
    want = stamp(checkpoint, SweBenchConfig.from_yaml(out / "swebench_config.yaml").to_dict())
    old = read_stamp(out / RUN_STAMP)
    # write_run's scripts and configs are there before the first claim: not an output of another stamp
    own = {Path(f).parts[0] for f in json.loads((out / GENERATED).read_text())} if (out / GENERATED).exists() else set()
    before = None if old is None else {"stamp": old, "state": RUNNING}
    with claim(out, "swebench", want, before=before, own=own) as c:
        removed = _remove_outputs(out) if c.action == REDO else []
        if removed:
            log.warning(
                "swebench: %s held results of another checkpoint or settings (%s changed); removed %d outputs "
                "(e.g. %s) before this run",
                out,
                ", ".join(change.split(":")[0] for change in c.decision.changes),
                len(removed),
                ", ".join(removed[:3]),
            )
        write_json(out / RUN_STAMP, want)
    return removed


def _remove_outputs(out: Path) -> list[str]:
    """Remove every file and folder under OUT but what write_run wrote, the stamp and the ledger's; return them."""
    keep = set(json.loads((out / GENERATED).read_text())) | {RUN_STAMP, LEASE, RECORD}
    keep |= {str(d) for k in list(keep) for d in Path(k).parents}  # the directories that hold them
    removed: list[str] = []
    for f in sorted(out.rglob("*"), key=lambda q: -len(q.parts)):
        rel = str(f.relative_to(out))
        if rel in keep or not f.exists():
            continue
        shutil.rmtree(f) if f.is_dir() else f.unlink()
        removed.append(rel)
    return removed
