"""Compare checkpoints side by side: benchmark x checkpoint with deltas, training curves, per-source
losses and the retrieval heat map, as Markdown + PNG + HTML.

Each RUN is a checkpoint's protocol directory (what `midtrain eval`/`midtrain sft` wrote under
PROTOCOL_OUTPUT/NAME), given as NAME=DIR or DIR (the name is then the directory's name). With
--checkpoint NAME=PATH a column shows only results made from that checkpoint's content (without: the content
its probe records); --steps names the step directories to read (the protocol passes its seeds). A result that
is not there, not complete or made from another checkpoint reads `missing: <reason>`, is listed at the end of
the report, and the command exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from midtrain.protocol import ProtocolConfig, checkpoint_dirs, report_steps
from recipes import resolve_config

EPILOG = """examples:
  midtrain report base=.demo/runs/protocol/base midtrained=.demo/runs/protocol/midtrained --output .demo/report
  midtrain report --protocol protocol_demo          # every checkpoint of a protocol recipe, into its report dir
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="*", metavar="RUN", help="NAME=DIR or DIR: a checkpoint's protocol directory")
    p.add_argument("--output", help="report directory (default: the protocol's report dir, else ./report)")
    p.add_argument("--baseline", help="checkpoint name deltas are taken against (default: the first)")
    p.add_argument("--title", default="midtraining comparison", help="report title")
    p.add_argument("--protocol", metavar="RECIPE", help="take the checkpoints from a protocol recipe")
    p.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="the checkpoint a column is of (repeatable): its cells must be made from its content",
    )
    p.add_argument(
        "--steps",
        metavar="LIST",
        help="comma-separated step directories to read per checkpoint (e.g. sft,sft-s2,proxy,swebench); "
        "default: sft and each eval directory present, no seed directories",
    )
    p.add_argument(
        "--note",
        action="append",
        default=[],
        metavar="NAME=TEXT",
        help="what a checkpoint is (repeatable), shown in the report",
    )


def run(args: argparse.Namespace) -> int:
    # lazy: loads scipy only when this runs
    from midtrain.eval.report import write_report

    runs: dict[str, str] = {}
    notes = dict(n.partition("=")[::2] for n in args.note)
    checkpoints = dict(c.partition("=")[::2] for c in args.checkpoint)
    steps = [s for s in (args.steps or "").split(",") if s] or None
    output, baseline, title = args.output, args.baseline, args.title
    if args.protocol:
        cfg = resolve_config(args.protocol, ProtocolConfig, "protocol")
        runs = {n: str(checkpoint_dirs(cfg, n)["root"]) for n in cfg.checkpoints}
        output = output or cfg.report_dir or str(Path(cfg.output) / "report")
        baseline = baseline or cfg.baseline_name
        title = cfg.name if title == "midtraining comparison" else title
        notes = {**cfg.notes, **notes}
        checkpoints = {**cfg.checkpoints, **checkpoints}
        steps = steps or report_steps(cfg)
    for item in args.runs:
        name, _, path = item.partition("=") if "=" in item else (Path(item).name, "", item)
        if name in runs:
            print(f"midtrain report: checkpoint name '{name}' given twice", file=sys.stderr)
            return 2
        runs[name] = path
    if not runs:
        print("midtrain report: give RUN directories or --protocol RECIPE", file=sys.stderr)
        return 2
    try:
        path = write_report(runs, output or "report", baseline, title, notes, checkpoints, steps)
    except ValueError as e:
        print(f"midtrain report: {e}", file=sys.stderr)
        return 2
    print(path)
    missing = json.loads((path.parent / "results.json").read_text())["missing"]
    if missing:
        cells = [f"{name} {what}: {why}" for name, m in missing.items() for what, why in m.items()]
        print(f"midtrain report: {len(cells)} result(s) missing, e.g. {cells[0]} (listed in {path})", file=sys.stderr)
        return 1
    return 0
