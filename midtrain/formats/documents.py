"""Documents: the JSONL(.gz) records every data stage reads and writes, their schema, writer and reader.

A document is one JSON object per line: ``{"text": str, "id": str, "metadata": {...}}``. The metadata
always carries :data:`REQUIRED_METADATA` (which source, repository and license it came from, and its id);
sources add their own keys beside them.

Writing: gzip JSONL whose bytes depend only on the documents. Plain gzip stamps the write time into every
file header, so a rerun (say, after a preemption) would give different bytes for the same documents. This
module registers an fsspec compression that writes gzip with a fixed mtime; any gzip reader reads it.
Importing the module registers it, which is why the writer lives here: a Slurm worker that unpickles the
writer imports this module first.

Reading: one lenient reader. A line that is not a JSON object, or a truncated ``.gz`` file, is counted and
logged with its file and line, never fatal. :func:`read_jsonl` reads plain paths; :class:`DocumentReader`
is the same rule as a datatrove pipeline step (counted in the step's stats, malformed documents marked for
the curation validator to drop with a reason).
"""

from __future__ import annotations

import gzip
import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from fsspec.compression import compr, register_compression

log = logging.getLogger("midtrain.documents")

TEXT = "text"
ID = "id"
METADATA = "metadata"
REQUIRED_METADATA = ("source", "repo", "license", "id")
# Set by the reader on a document whose text or metadata is malformed; the curation validator turns it into
# a counted drop (the document is kept for audit rather than lost silently).
MALFORMED_KEY = "_curation_malformed"
DOCUMENT_GLOB = "**/*.jsonl*"

REPRODUCIBLE_GZIP = "gzip-reproducible"


# Level 6 (zlib's default) writes ~3x faster than gzip's default 9 for ~1% larger files on code JSONL;
# every curation stage writes its documents, so this is a visible share of a prep run.
GZIP_LEVEL = 6


def _open_gzip_fixed_mtime(f, mode: str = "rb", **kwargs):
    kwargs.setdefault("compresslevel", GZIP_LEVEL)
    return gzip.GzipFile(fileobj=f, mode=mode, mtime=0, **kwargs)


if REPRODUCIBLE_GZIP not in compr:
    register_compression(REPRODUCIBLE_GZIP, _open_gzip_fixed_mtime, [])


class DocumentWriter(JsonlWriter):
    """datatrove's JsonlWriter with reproducible gzip output (``${rank}.jsonl.gz`` by default)."""

    name = "🐿 Jsonl (reproducible gzip)"

    def __init__(self, output_folder, output_filename: str = "${rank}.jsonl.gz", **kwargs) -> None:
        kwargs.setdefault("compression", REPRODUCIBLE_GZIP)
        super().__init__(output_folder, output_filename=output_filename, **kwargs)

    def _default_adapter(self, document: Document) -> dict:
        """datatrove's record (the non-empty fields text, id, media, metadata) without the deep copy of the
        metadata that ``dataclasses.asdict`` makes for every document: the same JSON, a third of the cost."""
        if document.media:
            return super()._default_adapter(document)
        data = {k: v for k, v in ((TEXT, document.text), (ID, document.id), (METADATA, document.metadata)) if v}
        if self.expand_metadata and METADATA in data:
            data |= data.pop(METADATA)
        return data


def write_jsonl_gz(path: str | Path, rows: Iterable[dict]) -> None:
    """One JSON object per line, gzip-compressed as the curation writer does it (no timestamp, same level):
    the same rows give the same bytes; no rows give an empty (valid) gzip file."""
    path = Path(path) if isinstance(path, str) else path  # a Path, or a universal_pathlib path in object storage
    with path.open("wb") as raw, _open_gzip_fixed_mtime(raw, "wb") as gz:
        for row in rows:
            gz.write((json.dumps(row, ensure_ascii=False) + "\n").encode())


# ----------------------------------------------------------------------------------------------------------
# reading


def parse_line(line: str | bytes) -> dict | str:
    """The JSON object on one line, or why it is not one ("bad_json" or "not_an_object")."""
    try:
        data = orjson.loads(line)  # orjson: the curation reader's hot path
    except orjson.JSONDecodeError:
        return "bad_json"
    return data if isinstance(data, dict) else "not_an_object"


def document_files(root: str | Path, pattern: str = DOCUMENT_GLOB) -> list[Path]:
    """The JSONL(.gz) files under ROOT, sorted (so every reader sees documents in the same order)."""
    root = Path(root) if isinstance(root, str) else root  # a Path, or a universal_pathlib path in object storage
    return sorted(p for p in root.glob(pattern) if p.is_file() and p.name.endswith((".jsonl", ".jsonl.gz")))


def read_jsonl(
    path: str | Path, drops: Counter | None = None, bad_reason: str = "bad_json"
) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each JSON object line of a JSONL(.gz) file, leniently.

    Blank lines are skipped; a line that is not a JSON object is logged and counted as ``drops[bad_reason]``;
    a file that breaks off (truncated gzip, bad bytes) is logged and counted as ``drops["unreadable_file"]``
    after yielding what it held.
    """
    path = Path(path) if isinstance(path, str) else path  # a Path, or a universal_pathlib path in object storage
    drops = Counter() if drops is None else drops
    try:
        with path.open("rb") as raw, gzip.open(raw) if path.name.endswith(".gz") else raw as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                row = parse_line(line)
                if isinstance(row, str):
                    drops[bad_reason] += 1
                    log.warning("%s:%d is not a JSON object (%s), skipped", path, lineno, row)
                    continue
                yield lineno, row
    except (EOFError, OSError) as e:
        drops["unreadable_file"] += 1
        log.warning("%s is unreadable after some records (%s: %s)", path, type(e).__name__, e)


class DocumentReader(JsonlReader):
    """datatrove's JsonlReader that never ends a job on a bad record: each one becomes a counted, auditable drop.

    Lines that are not JSON objects are counted here (``dropped_bad_json``); documents whose text is missing,
    empty or not a string are passed on marked with :data:`MALFORMED_KEY`, so the curation validator drops
    them with a reason and keeps them for audit. An empty input folder (everything dropped upstream) yields
    nothing.
    """

    name = "📖 curation reader"  # the name stats.json and logs have always shown

    def __init__(self, data_folder: str, **kwargs: Any):
        kwargs.setdefault("glob_pattern", DOCUMENT_GLOB)
        super().__init__(data_folder, adapter=_lenient_adapter, **kwargs)

    def read_file(self, filepath: str) -> Iterator[Document]:
        try:
            with self.data_folder.open(filepath, "r", compression=self.compression) as f:
                for li, line in enumerate(f):
                    if not line.strip():
                        continue
                    data = parse_line(line)
                    if isinstance(data, str):
                        self.stat_update("dropped_bad_json")
                        log.warning("%s line %d is not a JSON object (%s), skipped", filepath, li + 1, data)
                        continue
                    doc = self.get_document_from_dict(data, filepath, li)
                    if doc is not None:
                        yield doc
        except (UnicodeDecodeError, EOFError, OSError) as e:  # a truncated .gz or a corrupt file
            self.stat_update("dropped_unreadable_file")
            log.warning("%s is unreadable after some records (%s: %s)", filepath, type(e).__name__, e)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if not self.data_folder.exists("") or not self.data_folder.list_files(glob_pattern=self.glob_pattern):
            log.warning("no input files in %s (everything dropped upstream?)", self.data_folder.path)
            return
        yield from super().run(data, rank, world_size)


def _lenient_adapter(self: JsonlReader, data: dict, path: str, id_in_file: int | str) -> dict:
    metadata = data.pop(METADATA, None)
    if not isinstance(metadata, dict):
        metadata = {} if metadata is None else {"_raw_metadata": metadata, MALFORMED_KEY + "_meta": "not_a_dict"}
    text = data.pop(self.text_key, None)
    doc_id = data.pop(self.id_key, None)
    if doc_id is None:
        doc_id = metadata.get(ID)
    if doc_id is None or not isinstance(doc_id, (str, int)):
        doc_id = f"{path}/{id_in_file}"
    meta = metadata | {k: v for k, v in data.items() if k != "media"}
    if not isinstance(text, str):
        meta[MALFORMED_KEY] = "text_missing" if text is None else "text_not_str"
        meta["_raw_text"] = repr(text)[:2000]
        text = "\u2400"  # non-empty, so datatrove does not drop it silently; the validator drops it counted
    elif not text.strip():
        meta[MALFORMED_KEY] = "empty_text"
        text = text or "\u2400"
    return {TEXT: text, ID: str(doc_id), METADATA: meta}
