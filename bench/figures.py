"""The end of a bench script: its figures printed as a table and written as JSON for bench/run_all.py."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def emit(figures: dict[str, object], json_path: str | None) -> None:
    """Print one `name value` row per figure; write them to ``json_path`` (run_all.py's ``--json``) if given."""
    width = max(map(len, figures), default=0) + 2
    print(f"{'figure':<{width}} {'value':>10}")
    for k, v in figures.items():
        print(f"{k:<{width}} {v:>10}")
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(figures, indent=2))


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """The argument parser every bench script starts from: its docstring as help, and run_all.py's interface
    (``--json PATH`` for the figures, ``--smoke`` for a run of seconds that checks it runs)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", metavar="PATH", help="write the figures here")
    ap.add_argument("--smoke", action="store_true", help="a run of seconds: checks it runs, figures mean nothing")
    return ap
