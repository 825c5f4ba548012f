"""Shared pieces of the source readers: the reader base step, input discovery, error reports, anonymisation.

Every reader is a datatrove :class:`PipelineStep` that takes its input *units* (a repository, a file) in a
stable sorted order and keeps ``units[rank::world_size]``, so the output does not depend on timing and a
relaunch re-creates the same shards. Problems are handled record by record (midtrain.steps.CountedStep): each
one is counted in the step's datatrove stats as ``error/<reason>`` (a whole record lost), ``dropped/<reason>``
(a readable record left out on purpose) or ``skip/<reason>`` (a part left out of a document on purpose), and
errors are described (what, where) in a per-task error report that ``midtrain prep`` merges into ``stats.json``.
"""

from __future__ import annotations

import builtins
import gzip
import hashlib
import json
import logging
import os
import re
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
from datatrove.data import Document, DocumentsPipeline

from midtrain.config import Config, require
from midtrain.locations import ensure_dir, location
from midtrain.steps import READERS, CountedStep

log = logging.getLogger("midtrain.sources")

MAX_RECORD_BYTES = 32_000_000  # default cap of one JSONL record or JSON file (ReaderConfig.max_record_bytes)


@dataclass
class ReaderConfig(Config):
    """Settings every reader shares."""

    max_doc_bytes: int = 4_000_000  # documents are split (at natural boundaries) or capped above this
    # hostile or broken inputs (a gzip bomb, a one-line 2 GB file): readers stream and stop at these caps,
    # counting what they cut, so a worker's memory stays bounded
    max_input_bytes: int = 256_000_000  # decompressed bytes read from one input file
    max_record_bytes: int = MAX_RECORD_BYTES  # one JSONL record (line) or one JSON file

    def check(self) -> None:
        require(self.max_doc_bytes >= 1024, "max_doc_bytes", "must be at least 1024")
        require(self.max_input_bytes >= 1024, "max_input_bytes", "must be at least 1024")
        require(self.max_record_bytes >= 1024, "max_record_bytes", "must be at least 1024")


class _InputProgress:
    """Console progress of a reader: a line when each input is done (documents, errors, time), and a line
    every ``every_s`` seconds while a large input is being read."""

    def __init__(self, source: str, inputs: list[str], rank: int, world_size: int, every_s: float = 30.0):
        self.source, self.inputs, self.every_s = source, inputs, every_s
        self.task = f" (task {rank + 1}/{world_size})" if world_size > 1 else ""
        self.current: str | None = None
        self.counts: dict[str, int] = {}
        self.t_input = self.t_line = time.monotonic()

    def at(self, origin: str, counts: dict[str, int]) -> None:
        """The reader is about to read a unit of ``origin`` (``counts``: that input's live counters)."""
        if origin != self.current:
            self.done()
            self.current, self.counts = origin, counts
            self.t_input = self.t_line = time.monotonic()

    def tick(self, origin: str, counts: dict[str, int]) -> None:
        now = time.monotonic()
        if now - self.t_line >= self.every_s:
            self.t_line = now
            log.info(
                "%s%s: reading %s: %d documents so far (%.0fs)",
                self.source,
                self.task,
                origin,
                counts["documents"],
                now - self.t_input,
            )

    def done(self) -> None:
        """The current input is finished: say what it gave."""
        if self.current is None:
            return
        i = self.inputs.index(self.current) + 1
        log.info(
            "%s%s: input %d/%d %s: %d documents, %d errors (%.1fs)",
            self.source,
            self.task,
            i,
            len(self.inputs),
            self.current,
            self.counts["documents"],
            self.counts["errors"],
            time.monotonic() - self.t_input,
        )
        self.current = None


def make_document(
    text: str, doc_id: str, source: str, repo: str | None = None, license: str | None = None, **metadata: Any
) -> Document:
    """A datatrove Document with the metadata every source carries (midtrain.formats.documents.REQUIRED_METADATA)."""
    meta = {"source": source, "repo": repo, "license": license, "id": doc_id}
    meta.update(metadata)
    return Document(text=text, id=doc_id, metadata=meta)


def stable_hash(*parts: str, n: int = 12) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:n]


class Pseudonyms:
    """Replace people's names, logins and emails by ``<prefix>_<n>`` in order of first appearance.

    Numbering restarts per document, so the same input always gives the same text, and nothing derived from
    the real identity (not even a hash) is left in the output.
    """

    def __init__(self, prefix: str = "user"):
        self.prefix = prefix
        self.names: dict[str, str] = {}
        self._pattern: tuple[int, re.Pattern | None] = (0, None)  # (number of names it covers, regex)

    def __call__(self, *identities: str | None) -> str:
        keys = [i.strip().lower() for i in identities if i and i.strip()]
        for k in keys:
            if k in self.names:
                alias = self.names[k]
                break
        else:
            alias = f"{self.prefix}_{len(set(self.names.values())) + 1}"
        for k in keys:
            self.names.setdefault(k, alias)
        return alias

    def scrub(self, text: str) -> str:
        """Replace every known identity that appears in free text (mentions, sign-offs, emails)."""
        if not self.names or not text:
            return text
        if self._pattern[0] != len(self.names):  # rebuilt only when someone new appeared
            # longest first so 'Jane Doe' wins over 'Jane'; word boundaries keep 'ann' out of 'annotation'
            keys = sorted((k for k in self.names if len(k) >= 3), key=len, reverse=True)
            regex = (
                re.compile(r"(?<![\w.])@?(" + "|".join(re.escape(k) for k in keys) + r")(?![\w])", re.IGNORECASE)
                if keys
                else None
            )
            self._pattern = (len(self.names), regex)
        regex = self._pattern[1]
        return regex.sub(lambda m: self.names[m.group(1).lower()], text) if regex else text


def decode_utf8(data: bytes) -> str | None:
    """Strict UTF-8 (a BOM is dropped); None when the bytes are not valid UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text[1:] if text.startswith("\ufeff") else text


def looks_binary(data: bytes) -> bool:
    return b"\0" in data[:8192]


def open_input(path: Path) -> IO[bytes]:
    """A file as a binary stream, decompressed on the fly when it ends in .gz."""
    # typeshed's GzipFile and BufferedReader are io classes, not typing.IO (which they implement)
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")  # type: ignore[return-value]


def read_capped(path: Path, cap: int, head_and_tail: bool = False) -> tuple[bytes, int]:
    """(content, bytes left out) reading at most ``cap`` (decompressed) bytes, streamed: never more than
    about ``cap`` bytes in memory whatever the file expands to. With ``head_and_tail`` an oversized file
    gives its first and last ``cap // 2`` bytes (a log's failure is at its end), else its first ``cap``."""
    with open_input(path) as f:
        if not head_and_tail:
            data = f.read(cap)
            left = 0
            while chunk := f.read(1 << 20):
                left += len(chunk)
            return data, left
        half = cap // 2
        head = f.read(cap - half)
        tail: deque[bytes] = deque()
        size = left = 0
        while chunk := f.read(1 << 20):
            tail.append(chunk)
            size += len(chunk)
            while size - len(tail[0]) >= half:
                size -= len(tail[0])
                left += len(tail.popleft())
        rest = b"".join(tail)
        if len(rest) > half:
            left += len(rest) - half
            rest = rest[len(rest) - half :]
        return head + rest, left


TOO_LONG = object()  # iter_lines' stand-in for a line over the record cap
TRUNCATED = object()  # iter_lines' last item when the input cap was reached


def iter_lines(path: Path, max_line: int, max_total: int) -> Iterator[tuple[int, Any]]:
    """(line number, line bytes) of a (gzipped) text file, streamed. A line over ``max_line`` bytes comes as
    ``TOO_LONG`` (skipped without being held); past ``max_total`` bytes the last item is ``TRUNCATED``."""
    total = 0
    with open_input(path) as f:
        lineno = 0
        while True:
            line = f.readline(max_line + 1)
            if not line:
                return
            lineno += 1
            total += len(line)
            if len(line) > max_line and not line.endswith(b"\n"):
                while True:  # the rest of the over-long line, chunk by chunk
                    more = f.readline(1 << 20)
                    total += len(more)
                    if not more or more.endswith(b"\n") or total > max_total:
                        break
                yield lineno, TOO_LONG
            else:
                yield lineno, line
            if total > max_total:
                yield lineno, TRUNCATED
                return


class RecordTooLarge(ValueError):
    """A record (a JSONL line, a JSON file) over the reader's ``max_record_bytes``: skipped, counted, the rest read."""


def capped_lines(fh: IO[bytes], max_line: int, head: bytes = b"") -> Iterator[bytes | object]:
    """The lines of a binary stream (after ``head``, bytes of it already read), each at most ``max_line``
    bytes held: a longer line comes as ``TOO_LONG`` and its bytes are read past in chunks, never joined.
    Needs only ``read(n)`` (object-store files have no sized readline)."""
    parts: list[bytes] = []
    size, pos, too_long, buf = 0, 0, False, head
    while True:
        if pos >= len(buf):
            buf, pos = fh.read(1 << 20), 0
            if not buf:
                break
        cut = buf.find(b"\n", pos)
        end = len(buf) if cut < 0 else cut + 1
        piece, pos = buf[pos:end], end
        if not too_long:
            size += len(piece)
            if size > max_line:
                too_long, parts = True, []
            else:
                parts.append(piece)
        if cut >= 0:
            yield TOO_LONG if too_long else b"".join(parts)
            parts, size, too_long = [], 0, False
    if too_long:
        yield TOO_LONG
    elif parts:
        yield b"".join(parts)


def expand_inputs(inputs: Iterable[str | Path]) -> list[Path]:
    """Input paths as given; a ``.lst``/``.list`` file lists more paths, one a line (for very many inputs)."""
    out: list[Path] = []
    for item in inputs:
        p = Path(item).expanduser()
        if p.is_file() and p.suffix in (".lst", ".list"):
            for line in p.read_text().splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    out.append(Path(line.strip()).expanduser())
        else:
            out.append(p)
    return out


def walk_files(root: Path, suffixes: tuple[str, ...] | None = None) -> list[Path]:
    """Files under ``root`` (or root itself), sorted, optionally filtered by suffix; hidden dirs skipped."""
    if root.is_file():
        return [root]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if suffixes is None or name.endswith(suffixes):
                found.append(Path(dirpath) / name)
    return found


def file_units(inputs: Iterable[str | Path], suffixes: tuple[str, ...]) -> list[tuple[str, tuple[str, str]]]:
    """One unit per matching file: (input it came from, (file path, path relative to that input))."""
    units: list[tuple[str, tuple[str, str]]] = []
    for p in sorted(expand_inputs(inputs), key=str):
        root = p if p.is_dir() else p.parent
        files = walk_files(p, suffixes) if p.is_dir() else [p]
        units.extend((str(p), (str(f), f.relative_to(root).as_posix())) for f in files)
    return units


def path_units(inputs: Iterable[str | Path]) -> list[tuple[str, str]]:
    """One unit per input path (a repository, say), sorted: (input, input)."""
    return [(str(p), str(p)) for p in sorted(expand_inputs(inputs), key=str)]


class SourceReader(CountedStep):
    """Base of the source readers: sharding over input units, per-input counts, the error report.

    Counted in the readers' vocabulary (midtrain.steps.READERS): ``error/<reason>``, ``skip/<reason>``,
    ``dropped/<reason>``; what a reader drops goes to ``excluded/source/`` marked ``filter_reason``.
    """

    type = "📖 - READER"
    source: str = ""  # repos | commits | pulls | buildlogs | traces
    config_class: builtins.type[ReaderConfig] = ReaderConfig  # builtins: `type` above is datatrove's label
    vocabulary = READERS
    log = log
    report_name = "{rank:05d}.json"  # in report_dir; a stage before the assembling one reports under its own

    def __init__(
        self,
        inputs: list[str],
        cfg: ReaderConfig | None = None,
        report_dir: str | None = None,
        exclusion_dir: str | None = None,
    ):
        super().__init__(exclusion_dir)  # records dropped on purpose are written there (JSONL.gz per task)
        self.inputs = [str(p) for p in inputs]
        self.cfg = cfg or self.config_class()
        self.report_dir = report_dir
        self._per_input: dict[str, dict[str, int]] = {}

    @property
    def label(self) -> str:
        return self.source

    # -- to implement ---------------------------------------------------------------------------
    def units(self) -> list[tuple[str, Any]]:
        """Every unit of work as (input path it came from, unit), in a stable order; by default each input
        path is one unit (:func:`path_units`: a repository of the repos and commits readers)."""
        return path_units(self.inputs)

    def read_unit(self, unit: Any, origin: str) -> Iterator[Document]:
        raise NotImplementedError

    def unit_path(self, unit: Any) -> Path | None:
        """The file or directory a unit reads; run() counts it as missing_input when it is gone (an input
        listed in a .lst file, or deleted since the listing). None: the reader checks for itself."""
        return None

    # -- accounting -----------------------------------------------------------------------------
    def error(self, reason: str, where: str, detail: str = "", origin: str | None = None) -> None:
        """A record (or whole unit) that could not be used: counted (against ``origin``, the input it came
        from, when given), logged and reported."""
        if origin is not None:
            self._per_input.setdefault(origin, {"documents": 0, "errors": 0})["errors"] += 1
        super().error(reason, where, detail)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        units = self.units()
        mine = units[rank::world_size]
        for origin, _ in mine:
            self._per_input.setdefault(origin, {"documents": 0, "errors": 0})
        progress = _InputProgress(self.source, list(self._per_input), rank, world_size)
        with self.counting(rank):
            try:
                for origin, unit in mine:
                    progress.at(origin, self._per_input[origin])
                    yield from self._read_checked(unit, origin, progress)
            finally:
                progress.done()
                self._write_report(rank)

    def _read_checked(self, unit: Any, origin: str, progress: _InputProgress) -> Iterator[Document]:
        """One unit's documents, each counted; a unit that breaks off is counted unreadable, the rest kept."""
        path = self.unit_path(unit)
        if path is not None and not path.exists():
            self.stat_update("records")
            self.error("missing_input", str(path), "no such file or directory", origin)
            return
        docs = self.read_unit(unit, origin)
        while True:  # streamed: a huge input file is never held in memory
            try:
                doc = next(docs)
            except StopIteration:
                return
            except Exception as e:  # noqa: BLE001 - one bad unit must not end the job; it is reported
                # documents already yielded from this unit are kept; the rest of it is lost and counted
                self.error("unreadable", str(unit), f"{type(e).__name__}: {e}", origin)
                return
            try:  # lone surrogates (e.g. "\ud800" escapes in JSON input) cannot be written as UTF-8
                n_bytes = len(doc.text.encode("utf-8"))
                orjson.dumps(doc.metadata)
            except (UnicodeEncodeError, TypeError) as e:
                self.error("invalid_unicode", doc.id, str(e), origin)
                continue
            self._per_input[origin]["documents"] += 1
            progress.tick(origin, self._per_input[origin])
            self.stat_update("documents")
            self.stat_update("bytes", value=n_bytes)
            self.update_doc_stats(doc)
            yield doc

    def _write_report(self, rank: int) -> None:
        if not self.report_dir:
            return

        path = location(self.report_dir) / self.report_name.format(rank=rank)
        ensure_dir(path.parent)
        path.write_text(json.dumps({"errors": self._errors, "inputs": self._per_input}, indent=1))
