"""The counted step: the one base of the source readers and the curation steps (datatrove PipelineSteps).

A step accounts for every record it sees in datatrove's own stats (``stat_update``), by reason: a record is
kept, *changed* (text rewritten), has a part *skipped* (left out on purpose), is *dropped* (a whole, readable
record left out on purpose: written, marked with its reason, to the step's exclusion folder, one reproducible
JSONL.gz per task) or is an *error* (a record that could not be used: counted, logged and described, at most
MAX_DESCRIBED_ERRORS a task). A step never ends its job on one bad record.

The readers and the curation steps have always named these stats differently (``dropped/<reason>`` against
``dropped_<reason>``, ``filter_reason`` against ``curation_reason``), and those names are in every stats.json,
data card, `midtrain inspect` output and excluded document: each family keeps its :class:`Vocabulary`
(READERS, CURATION), and :func:`stat_kinds` sorts any stat name into its kind for `midtrain prep`'s summary.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep

from midtrain.formats.documents import DocumentWriter

MAX_DESCRIBED_ERRORS = 200  # per task; every error is counted, only the first ones are described


@dataclass(frozen=True)
class Vocabulary:
    """How a family of steps names its stats (``{}`` is the reason) and marks the records it excludes."""

    drop: str
    skip: str
    change: str
    error: str
    reason_key: str  # metadata key of an excluded record's reason
    step_key: str | None = None  # metadata key naming the step that excluded it
    detail_key: str | None = None  # metadata key of the drop's detail (which license, which benchmark repo ...)
    drop_total: str | None = None  # a stat counting every drop of the step


READERS = Vocabulary(
    drop="dropped/{}", skip="skip/{}", change="changed/{}", error="error/{}", reason_key="filter_reason"
)
# a curation step's error is a drop of the document as error_<ExceptionType> (midtrain.curate.base)
CURATION = Vocabulary(
    drop="dropped_{}",
    skip="removed_{}",
    change="changed_{}",
    error="dropped_error_{}",
    reason_key="curation_reason",
    step_key="curation_step",
    detail_key="curation_detail",
    drop_total="dropped",
)
FAMILIES = (READERS, CURATION)


def stat_kinds() -> dict[str, tuple[str, ...]]:
    """{"drops" | "skips" | "changes": the stat name prefixes of that kind, every family's}; errors are drops."""

    def prefixes(*fields: str) -> tuple[str, ...]:
        return tuple(getattr(v, f).removesuffix("{}") for v in FAMILIES for f in fields)

    return {"drops": prefixes("error", "drop"), "skips": prefixes("skip"), "changes": prefixes("change")}


class CountedStep(PipelineStep):
    """A datatrove step whose records are counted by reason; what it drops goes to its exclusion folder."""

    vocabulary: ClassVar[Vocabulary] = CURATION
    step_name = "step"  # short name: the exclusion folder's and the excluded records' (CURATION.step_key)
    log: ClassVar[logging.Logger] = logging.getLogger("midtrain")

    def __init__(self, exclusion_dir: str | None = None):
        super().__init__()
        self.exclusion_dir = exclusion_dir
        self._excluded: DocumentWriter | None = None
        self._errors: list[dict] = []
        self._rank = 0

    @property
    def label(self) -> str:
        """How log lines name the step."""
        return self.step_name

    # -- accounting -----------------------------------------------------------------------------------------
    def change(self, reason: str, n: int = 1) -> None:
        """Text rewritten on purpose (a secret redacted, files trimmed): counted only."""
        self.stat_update(self.vocabulary.change.format(reason), value=n)

    def skip(self, reason: str, n: int = 1, part: Callable[[], Document] | None = None) -> None:
        """A part deliberately left out of a document (a vendored file, a bot comment): counted; ``part`` builds
        it as a document of its own, kept for audit in the exclusion folder (built only when there is one)."""
        self.stat_update(self.vocabulary.skip.format(reason), value=n)
        if part is not None and self.exclusion_dir:
            self._write_excluded(part())

    def drop(
        self, reason: str, document: Document | Callable[[], Document] | None = None, detail: str | None = None
    ) -> None:
        """A whole, readable record filtered out on purpose: counted, and written marked with its reason (and
        ``detail``) to the exclusion folder when there is one (``document`` may build it lazily)."""
        v = self.vocabulary
        self.stat_update(*((v.drop_total,) if v.drop_total else ()), v.drop.format(reason))
        if document is None or not self.exclusion_dir:
            return
        doc = document() if callable(document) else document
        doc.metadata.update(self.marks(reason, detail))
        if not isinstance(doc.text, str):  # a record the validator drops for its text: kept, as its repr
            doc.text = repr(doc.text)
        self._write_excluded(doc)

    def error(self, reason: str, where: str, detail: str = "") -> None:
        """A record (or a whole input) that could not be used: counted, logged and described."""
        self.stat_update(self.vocabulary.error.format(reason))
        if len(self._errors) < MAX_DESCRIBED_ERRORS:
            self._errors.append({"reason": reason, "where": where, "detail": detail[:500]})
        self.log.warning("%s: %s at %s%s", self.label, reason, where, f" ({detail[:200]})" if detail else "")

    def marks(self, reason: str, detail: str | None = None) -> dict[str, str]:
        """The metadata an excluded record carries: which step left it out, why, and the detail."""
        v = self.vocabulary
        out = {v.step_key: self.step_name} if v.step_key else {}
        out[v.reason_key] = reason
        if detail and v.detail_key:
            out[v.detail_key] = detail
        return out

    def _write_excluded(self, doc: Document) -> None:
        if self._excluded is None:
            assert self.exclusion_dir is not None  # callers write only when there is a folder
            self._excluded = DocumentWriter(self.exclusion_dir)
        self._excluded.write(doc, rank=self._rank)

    @contextmanager
    def counting(self, rank: int) -> Iterator[None]:
        """Around a task's run: the exclusion folder's file of task ``rank`` is closed when the task ends."""
        self._rank = rank
        try:
            yield
        finally:
            if self._excluded is not None:
                self._excluded.close()
                self._excluded = None
