"""CONTRIBUTING.md's lists of files to touch name files and names that exist: a file moved or a constant renamed
makes its list wrong, and this test says which."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "CONTRIBUTING.md"
PATH = re.compile(r"`((?:midtrain|recipes|data_prep|tests)/[\w/.-]+\.(?:py|txt|tsv))`")
# "`path` `CONSTANT`": the constant is defined in that file
NAMED = re.compile(r"`((?:midtrain|recipes)/[\w/.-]+\.py)` `([A-Z][A-Z_]+)`")


def _named_paths(text: str) -> list[str]:
    return [p for p in PATH.findall(text) if "NAME" not in p]


def test_every_file_the_guide_names_exists():
    paths = _named_paths(GUIDE.read_text())
    assert len(paths) > 10
    missing = [p for p in paths if not (REPO / p).is_file()]
    assert not missing, f"CONTRIBUTING.md names files that do not exist: {missing}"


def test_every_constant_the_guide_names_is_in_its_file():
    pairs = NAMED.findall(GUIDE.read_text())
    assert pairs
    missing = [(p, c) for p, c in pairs if not re.search(rf"^{c}\b", (REPO / p).read_text(), re.M)]
    assert not missing, f"CONTRIBUTING.md names constants their files do not define: {missing}"


def test_the_checks_find_a_wrong_name():
    assert _named_paths("`midtrain/nosuch.py` and `data_prep/NAME.py`") == ["midtrain/nosuch.py"]
    assert NAMED.findall("`midtrain/pack/pack_step.py` `BY_REPO`") == [("midtrain/pack/pack_step.py", "BY_REPO")]
