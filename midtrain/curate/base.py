"""Pieces every curation step shares: the step base class, text edits, repo file spans.

Every step follows one contract (midtrain.steps.CountedStep, in the CURATION vocabulary): a document is kept,
changed (counted ``changed_<reason>``), has parts cut out (``removed_<reason>``, each part kept for audit) or
is dropped (counted ``dropped_<reason>`` and written, with ``metadata["curation_reason"]``, to the step's
exclusion folder ``<prep dir>/excluded/<step>/``). An exception on one document drops that document as
``dropped_error_<ExceptionType>``; it never ends the job.
"""

from __future__ import annotations

import bisect
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from datatrove.data import Document, DocumentsPipeline

from midtrain.formats.documents import MALFORMED_KEY, REQUIRED_METADATA
from midtrain.formats.source_specs import doc_traits
from midtrain.steps import CURATION, CountedStep

log = logging.getLogger("midtrain.curate")

# ----------------------------------------------------------------------------------------------------------
# the step base


class Drop(Exception):
    """Raised by :meth:`CurationStep.process` to drop the document with a reason."""

    def __init__(self, reason: str, detail: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class CurationStep(CountedStep):
    """A per-document curation step: :meth:`process` each document, counted, drops kept for audit."""

    type = "🧹 - CURATE"
    vocabulary = CURATION
    log = log

    @property
    def label(self) -> str:
        return f"curate/{self.step_name}"

    def process(self, doc: Document) -> None:
        """Check/modify ``doc`` in place; raise :class:`Drop` to remove it."""
        raise NotImplementedError

    def exclude_part(self, parent: Document, text: str, reason: str, **meta: Any) -> None:
        """A part cut out of a document (a trimmed file): counted as ``removed_<reason>``, kept for audit."""
        self.skip(
            reason,
            part=lambda: Document(
                text=text,
                id=f"{parent.id}#{meta.get('path', 'part')}",
                metadata={
                    "parent_id": parent.id,
                    "source": parent.metadata.get("source"),
                    "repo": parent.metadata.get("repo"),
                    **self.marks(reason),
                    **meta,
                },
            ),
        )

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        with self.counting(rank):
            for doc in data or []:
                self.stat_update("total")
                with self.track_time():
                    try:
                        self.process(doc)
                    except Drop as d:
                        self.drop(d.reason, doc, d.detail)
                        continue
                    except Exception as e:  # noqa: BLE001 - one bad document must not end the job
                        self.log.warning("%s: document %s dropped on %s: %s", self.label, doc.id, type(e).__name__, e)
                        self.drop(f"error_{type(e).__name__}", doc, str(e)[:500])
                        continue
                self.stat_update("forwarded")
                yield doc


class ValidateDocuments(CurationStep):
    """First step: drop records whose text is unusable, give missing required metadata
    (formats.documents.REQUIRED_METADATA) a null value.

    Repairs are counted ``changed_missing_<key>``; drops ``dropped_text_not_str``, ``dropped_text_missing``,
    ``dropped_empty_text``, ``dropped_bad_loss_spans``.
    """

    name = "✅ validate"
    step_name = "validate"

    def process(self, doc: Document) -> None:
        meta = doc.metadata
        if meta.pop(MALFORMED_KEY + "_meta", None):
            self.change("metadata_not_dict")
        reason = meta.pop(MALFORMED_KEY, None)
        if reason:
            raise Drop(reason)
        if not isinstance(doc.text, str):
            raise Drop("text_not_str")
        for key in REQUIRED_METADATA:
            if key not in meta:
                meta[key] = doc.id if key == "id" else None
                self.change(f"missing_{key}")
        for key in ("repo", "license", "source"):
            if meta[key] is not None and not isinstance(meta[key], str):
                meta[key] = None
                self.change(f"bad_{key}")
        if "loss_spans" in meta and not _valid_spans(meta["loss_spans"], len(doc.text)):
            raise Drop("bad_loss_spans")


def _valid_spans(spans: Any, n: int) -> bool:
    if not isinstance(spans, list):
        return False
    for s in spans:
        if not (isinstance(s, (list, tuple)) and len(s) == 2 and all(isinstance(x, int) for x in s)):
            return False
        if not 0 <= s[0] <= s[1] <= n:
            return False
    return True


# ----------------------------------------------------------------------------------------------------------
# text edits that keep offset-bearing metadata right


@dataclass
class Edit:
    start: int
    end: int
    replacement: str


def apply_edits(doc: Document, edits: Iterable[Edit]) -> None:
    """Apply non-overlapping edits to ``doc.text`` and move every char offset in its metadata along.

    Offsets live in ``loss_spans`` (traces) and in the repository file table (``file_offsets``); an
    offset inside a replaced span maps to the replacement's start (span starts) or end (span ends).
    """
    edits = sorted(edits, key=lambda e: e.start)
    if not edits:
        return
    text = doc.text
    out, pos = [], 0
    starts, deltas = [], []  # cumulative shift after each edit
    shift = 0
    for e in edits:
        if e.start < pos:  # overlapping: keep the earlier one
            continue
        out.append(text[pos : e.start])
        out.append(e.replacement)
        pos = e.end
        shift += len(e.replacement) - (e.end - e.start)
        starts.append(e)
        deltas.append(shift)
    out.append(text[pos:])
    doc.text = "".join(out)

    ends = [e.end for e in starts]

    def move(off: int, is_end: bool) -> int:
        i = bisect.bisect_right(ends, off)  # edits fully before (end <= off)
        before = deltas[i - 1] if i else 0
        if i < len(starts) and starts[i].start < off:  # inside edit i
            e = starts[i]
            base = e.start + before
            return base + (len(e.replacement) if is_end else 0)
        return off + before

    spans = doc.metadata.get("loss_spans")
    if isinstance(spans, list):
        doc.metadata["loss_spans"] = [[move(s, False), move(t, True)] for s, t in spans]
    ctx = doc.metadata.get("context_span")  # a pull request's read files (midtrain/sources/pulls.py)
    if isinstance(ctx, list) and len(ctx) == 2 and all(isinstance(o, int) for o in ctx):
        doc.metadata["context_span"] = [move(ctx[0], False), move(ctx[1], True)]
    offsets = doc.metadata.get(FILE_OFFSETS_KEY)
    if isinstance(offsets, list) and all(isinstance(o, int) for o in offsets):
        doc.metadata[FILE_OFFSETS_KEY] = [move(o, False) for o in offsets]


# ----------------------------------------------------------------------------------------------------------
# repository documents: file boundaries

# repos documents (midtrain/sources/repos.py): metadata["files"] = paths in document order and
# metadata["file_offsets"] = char offset of each file's header; a file runs to the next header (or the end)
FILE_PATHS_KEY = "files"
FILE_OFFSETS_KEY = "file_offsets"
# Fallback when there is no table: the Qwen2.5-Coder style separator line before each file.
FILE_SEP_RE = re.compile(r"^<\|file_sep\|>(?P<path>[^\n]*)\n", re.MULTILINE)


@dataclass
class FileSpan:
    path: str
    start: int  # char offsets of the whole file block (header included) in doc.text
    end: int


def repo_files(doc: Document) -> list[FileSpan]:
    """The file blocks of a repository document, from its file table or its separator lines; [] if none."""
    paths, offsets = doc.metadata.get(FILE_PATHS_KEY), doc.metadata.get(FILE_OFFSETS_KEY)
    n = len(doc.text)
    if (
        isinstance(paths, list)
        and isinstance(offsets, list)
        and paths
        and len(paths) == len(offsets)
        and all(isinstance(o, int) for o in offsets)
        and offsets == sorted(offsets)
        and 0 <= offsets[0]
        and offsets[-1] <= n
    ):
        return [
            FileSpan(str(p), o, offsets[i + 1] if i + 1 < len(offsets) else n)
            for i, (p, o) in enumerate(zip(paths, offsets))
        ]
    heads = list(FILE_SEP_RE.finditer(doc.text))
    return [
        FileSpan(m.group("path").strip(), m.start(), heads[i + 1].start() if i + 1 < len(heads) else n)
        for i, m in enumerate(heads)
    ]


def is_repo_doc(doc: Document) -> bool:
    """A packed repository (file blocks), as its source's registration says."""
    traits = doc_traits(doc.metadata.get("source"))
    return traits is not None and traits.packed_files


def remove_files(doc: Document, spans: list[FileSpan]) -> None:
    """Cut whole file blocks out of a repository document (and out of its file table)."""
    if not spans:
        return
    gone = {s.start for s in spans}
    paths, offsets = doc.metadata.get(FILE_PATHS_KEY), doc.metadata.get(FILE_OFFSETS_KEY)
    if isinstance(paths, list) and isinstance(offsets, list) and len(paths) == len(offsets):
        keep = [i for i, o in enumerate(offsets) if o not in gone]
        doc.metadata[FILE_PATHS_KEY] = [paths[i] for i in keep]
        doc.metadata[FILE_OFFSETS_KEY] = [offsets[i] for i in keep]
    apply_edits(doc, [Edit(s.start, s.end, "") for s in spans])
