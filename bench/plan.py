"""Kept for old command lines: the planner is `midtrain plan` (midtrain/launch/plan.py); this runs it.

.venv/bin/python bench/plan.py ARGS...   ==   midtrain plan ARGS...
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from midtrain.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["plan", *sys.argv[1:]]))
