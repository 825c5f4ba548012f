"""Compare checkpoints side by side: benchmark x checkpoint with deltas, training curves, per-source
losses and the retrieval heat map, as Markdown + PNG + HTML.

Each RUN is a checkpoint's protocol directory (what `midtrain eval`/`midtrain sft` wrote under
PROTOCOL_OUTPUT/NAME), given as NAME=DIR or DIR (the name is then the directory's name). Missing results
show as '—' and are listed at the end of the report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
        "--note",
        action="append",
        default=[],
        metavar="NAME=TEXT",
        help="what a checkpoint is (repeatable), shown in the report",
    )


def run(args: argparse.Namespace) -> int:
    from midtrain.eval.report import write_report

    runs: dict[str, str] = {}
    notes = dict(n.partition("=")[::2] for n in args.note)
    output, baseline, title = args.output, args.baseline, args.title
    if args.protocol:
        from midtrain.protocol import ProtocolConfig, checkpoint_dirs
        from recipes import resolve_config

        cfg = resolve_config(args.protocol, ProtocolConfig, "protocol")
        runs = {n: str(checkpoint_dirs(cfg, n)["root"]) for n in cfg.checkpoints}
        output = output or cfg.report_dir or str(Path(cfg.output) / "report")
        baseline = baseline or cfg.baseline_name
        title = cfg.name if title == "midtraining comparison" else title
        notes = {**cfg.notes, **notes}
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
        path = write_report(runs, output or "report", baseline, title, notes)
    except ValueError as e:
        print(f"midtrain report: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0
