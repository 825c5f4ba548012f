"""Every command line shown to users: the code blocks of README.md, docs/*.md, CONTRIBUTING.md and
slurm/README.md, and every `--help` epilog.

``documented_examples()`` returns them as (where, command line) pairs, continuation lines joined and trailing
``# comments`` removed, so tests/test_documented_examples.py can run each one.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# In reading order: the guides as the README lists them (the order an example runs in within its group,
# tests/test_documented_examples.py, is the order shown here). Every docs/*.md must be listed
# (tests/test_documented_examples.py::test_every_guide_is_read).
DOCS = (
    "README.md",
    "docs/configs.md",
    "docs/prep.md",
    "docs/pack.md",
    "docs/train.md",
    "docs/evals.md",
    "docs/slurm.md",
    "docs/real_model.md",
    "docs/reference.md",
    "docs/troubleshooting.md",
    "docs/development.md",
    "CONTRIBUTING.md",
    "slurm/README.md",
)
# a shown command starts with one of these words (prose lines in code blocks do not)
COMMAND_WORDS = (
    "midtrain",
    "torchrun",
    "sbatch",
    "make",
    "python",
    ".venv/bin/python",
    ".venv/bin/pre-commit",
    "bench/",
    "tests/",
    "pip",
    "scancel",
    "scontrol",
    "aws",
)
# user_properties key of a documented-examples test: [(wall s, CPU s, command line)] per example it ran, sent
# to the controller under xdist like any report; tests/conftest.py prints them
EXAMPLE_TIMES = "documented_example_times"


def _strip_comment(line: str) -> str:
    """Drop a trailing `#` comment (a `#` after whitespace, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _commands(lines: list[str]) -> list[str]:
    """Command lines among code lines: continuation lines joined, comments dropped."""
    out: list[str] = []
    pending = ""
    for raw in lines:
        text = raw.strip()
        if pending:
            pending += " " + text
        elif text.split(" ", 1)[0].startswith(COMMAND_WORDS):
            pending = text
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        out.append(re.sub(r"\s+", " ", _strip_comment(pending)))
        pending = ""
    return out


def markdown_examples(path: Path) -> list[str]:
    """Commands in fenced (```) and indented (4 spaces) code blocks of a Markdown file."""
    code: list[str] = []
    fenced = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            code.append("")  # a block boundary ends any continuation
            continue
        if fenced or line.startswith("    "):
            code.append(line)
        else:
            code.append("")
    return [c for c in _commands(code) if c]


def _parsers(parser: argparse.ArgumentParser, name: str):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def epilog_examples() -> list[tuple[str, str]]:
    from midtrain.cli import build_parser

    out: list[tuple[str, str]] = []
    for name, parser in _parsers(build_parser(), "midtrain"):
        for cmd in _commands((parser.epilog or "").splitlines()):
            out.append((f"`{name} --help`", cmd))
    return out


def documented_examples() -> list[tuple[str, str]]:
    """(where, command) for every shown command line; a command shown in several places is listed once."""
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    items = [(doc, c) for doc in DOCS for c in markdown_examples(REPO / doc)] + epilog_examples()
    for where, cmd in items:
        if cmd not in seen:
            seen.add(cmd)
            out.append((where, cmd))
    return out
