"""The end of a bench script: its figures printed as a table and written as JSON for bench/run_all.py."""

from __future__ import annotations

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
