"""What every stage needs to know about a data source, registered once: its traits, keyed by its prep name.

Curation, packing, sweeps and ``midtrain plan`` read a source's behaviour from here instead of naming
sources. The reader and its pipeline (the stage that produces the documents) are bound to the same name in
``midtrain/sources/specs.py``; these traits live down here because curation and packing read them and may
not import the readers. Every field is required, so a new source states each trait instead of inheriting a
silent default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Content decontamination that applies to a source's documents (midtrain.curate.decontam):
# "files": the document is a packed repository; its file bodies are matched against the benchmarks' files
# "diff": the document holds diffs; the paths they touch are matched against the benchmarks' files
DecontamKind = Literal["files", "diff"]


@dataclass(frozen=True)
class SourceTraits:
    name: str  # the prep name (`midtrain prep NAME`, the output folder, plan rates and keeps)
    doc_source: str  # the `source` its documents carry (what mixture weights are keyed by)
    # its documents come from one repository: decontamination records their identity (decontam.require_identity)
    repository_derived: bool
    # when a run is split by repository, its documents of training repositories all train (held-out loss on code
    # no training document holds); otherwise a source's documents of training repositories split by document
    valid_by_repository: bool
    packed_files: bool  # a document is a packed repository, file blocks (curation filters and dedups per file)
    decontam: frozenset[DecontamKind]  # the content matching that applies (empty: by repository only)
    task_instance: bool  # its documents attempt or solve one task instance (midtrain.formats.trace_split)
    # packing a mixture: an input of this source carries its own recorded held-out split (a trace set's)
    recorded_split: bool
    # `midtrain plan` defaults: reader MB/s of input per core and the fraction curation keeps (assumptions)
    plan_read_mb_s: float
    plan_keep: float

    def __post_init__(self) -> None:
        if "files" in self.decontam and not self.packed_files:
            raise ValueError(f"source {self.name}: decontam 'files' reads file blocks; it needs packed_files")


SOURCE_TRAITS: dict[str, SourceTraits] = {
    t.name: t
    for t in (
        SourceTraits(
            name="repos",
            doc_source="repo",
            repository_derived=True,
            valid_by_repository=True,
            packed_files=True,
            decontam=frozenset({"files"}),
            task_instance=False,
            recorded_split=False,
            plan_read_mb_s=0.76,
            plan_keep=0.45,
        ),
        SourceTraits(
            name="commits",
            doc_source="commit",
            repository_derived=True,
            valid_by_repository=True,
            packed_files=False,
            decontam=frozenset({"diff"}),
            task_instance=False,
            recorded_split=False,
            plan_read_mb_s=5.86,
            plan_keep=0.6,
        ),
        SourceTraits(
            name="pulls",
            doc_source="pr",
            repository_derived=True,
            valid_by_repository=False,
            packed_files=False,
            decontam=frozenset({"diff"}),
            task_instance=True,
            recorded_split=False,
            plan_read_mb_s=8.73,
            plan_keep=0.7,
        ),
        SourceTraits(
            name="buildlogs",
            doc_source="buildlog",
            repository_derived=False,
            valid_by_repository=False,
            packed_files=False,
            decontam=frozenset(),
            task_instance=False,
            recorded_split=False,
            plan_read_mb_s=1.85,
            plan_keep=0.3,
        ),
        SourceTraits(
            name="traces",
            doc_source="trace",
            repository_derived=False,
            valid_by_repository=False,
            packed_files=False,
            decontam=frozenset(),
            task_instance=True,
            recorded_split=True,
            plan_read_mb_s=0.78,
            plan_keep=0.8,
        ),
    )
}


def doc_traits(doc_source: object) -> SourceTraits | None:
    """The traits of the source whose documents carry ``source: doc_source``; None for an unknown one."""
    return next((t for t in SOURCE_TRAITS.values() if t.doc_source == doc_source), None)


def doc_sources_with(**traits: object) -> tuple[str, ...]:
    """The document ``source`` names of the registered sources with these trait values."""
    return tuple(t.doc_source for t in SOURCE_TRAITS.values() if all(getattr(t, k) == v for k, v in traits.items()))


def prep_doc_source(name: str) -> str:
    """A prep name's document ``source`` name (``pulls`` -> ``pr``)."""
    return SOURCE_TRAITS[name].doc_source
