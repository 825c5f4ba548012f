"""Decontamination follows a source's registered traits, not a list of source names.

A source registered as repository-derived, with diff matching, has its documents matched by the paths their
diffs touch and its identity recorded; the same document from a source registered without those traits is
matched by repository name only. The stand-in benchmark is tests/data/decontam's (its shipped index).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from datatrove.data import Document

from midtrain.curate.base import Drop
from midtrain.curate.decontam import DecontamConfig, SweBenchRepoFilter
from midtrain.formats.source_specs import SOURCE_TRAITS, SourceTraits

INDEX = Path(__file__).parent / "data" / "decontam" / "bench_index.json"
# a diff that touches only files of the benchmark repository, from a repository under another name
DIFF = "".join(
    f"diff --git a/benchlib/{name} b/benchlib/{name}\n--- a/benchlib/{name}\n+++ b/benchlib/{name}\n@@ -1 +1 @@\n-a\n+b\n"
    for name in ("render.py", "util.py")
)


def traits(name: str, repository_derived: bool, decontam: frozenset) -> SourceTraits:
    return SourceTraits(
        name=name,
        doc_source=name.rstrip("s"),
        repository_derived=repository_derived,
        valid_by_repository=False,
        packed_files=False,
        decontam=decontam,
        task_instance=False,
        recorded_split=False,
        plan_read_mb_s=1.0,
        plan_keep=1.0,
    )


@pytest.fixture
def step(monkeypatch):
    monkeypatch.setitem(SOURCE_TRAITS, "mirrors", traits("mirrors", True, frozenset({"diff"})))
    monkeypatch.setitem(SOURCE_TRAITS, "notes", traits("notes", False, frozenset()))
    return SweBenchRepoFilter(DecontamConfig(index=str(INDEX), use_bundled_list=False, use_swebench_package=False))


def doc(source: str) -> Document:
    meta = {"source": source, "repo": "someone/tables-fork", "license": None}
    return Document(text=DIFF, id=f"{source}:1", metadata=meta)


def test_a_repository_derived_source_gets_diff_decontamination_and_an_identity(step):
    d = doc("mirror")
    with pytest.raises(Drop) as drop:
        step.process(d)
    assert drop.value.reason == "swebench_diff"
    assert d.metadata["identity"] == {"method": "content", "repo": "benchorg/benchlib"}


def test_a_source_without_the_traits_is_matched_by_repository_name_only(step):
    d = doc("note")
    step.process(d)  # kept: nothing in its registration asks for content matching
    assert "identity" not in d.metadata
