"""What the generated SWE-bench scripts share: shell quoting, the script header, the job's Python and steps,
the files a unit's steps leave for the collection."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

STEPS = ("agent", "grade")  # each unit's scripts; run.sh keeps <unit>/<step>.log and <step>.rc beside them
INSTANCES = "instances.txt"  # the instance ids a unit's agent was asked to run: the denominator
SERVER_FAILED = "server.failed"  # run.sh writes it (with the cause) when vLLM never answered

SERVER_LOG = "server.jsonl"  # the CPU server's log of each call (midtrain.eval.serve)

# The generated scripts run the job's Python ($MIDTRAIN_PYTHON: the site's venv or container) and call the
# steps of midtrain.eval.swebench_steps with it; litellm must not fetch its cost map in every process.
PY = "${MIDTRAIN_PYTHON:-python}"
STEP = f"{PY} -m midtrain.eval.swebench_steps"
ENV = "export LITELLM_LOCAL_MODEL_COST_MAP=True  # litellm: no network fetch of its cost map per process"


def sh(*parts: str) -> str:
    return " ".join(shlex.quote(p) for p in parts)


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\nset -euo pipefail\n" + body + "\n")
    path.chmod(0o755)
    return path


class BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the agent's prompt templates) as readable `|` blocks."""


BlockDumper.add_representer(
    str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)
)
