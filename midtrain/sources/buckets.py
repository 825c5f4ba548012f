"""Grouping table rows by repository across tasks: a datatrove stage pair (partition, then assemble).

Rows of one repository are scattered over many table files in any order (one row per file of a repository,
or per changed file of a commit). No task may hold every row, so grouping runs as two stages:

1. partition - every task reads its share of the table files and writes each row, as a small datatrove
   Document, to ``ROWS/<bucket>/<rank>.jsonl.gz`` where ``bucket = hash(repository) % buckets``;
2. assemble - task ``r`` takes buckets ``r, r + tasks, ...``; for each it reads that bucket's files from
   every partition task, groups the rows by repository and renders the documents.

A repository's rows all land in one bucket, so the documents do not depend on the number of tasks or
buckets; only memory does (one bucket is held at a time: size ``buckets`` so one fits comfortably).
Both stages are ordinary datatrove stages: resumable from completion markers, and job arrays on Slurm.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from datatrove.data import Document
from datatrove.io import get_datafolder

from midtrain.sources.common import SourceReader
from midtrain.sources.tables import readable_rows, table_units, unit_name


def bucket_of(key: str, buckets: int) -> str:
    """The bucket (zero-padded, for file names) of a grouping key; stable across processes and machines."""
    h = int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
    return f"{h % buckets:05d}"


def bucket_filename() -> str:
    """The partition writer's file name template: one file per (bucket, partition task)."""
    return "${bucket}/${rank}.jsonl"


def grouping_stages(
    partitioner: SourceReader, assembler: SourceReader, rows_dir: str, raw_dir: str
) -> tuple[list, list]:
    """(partition pipeline, assemble pipeline): rows written to their buckets, then each bucket's groups rendered."""
    from datatrove.pipeline.writers import JsonlWriter

    return (
        [partitioner, JsonlWriter(rows_dir, output_filename=bucket_filename())],
        [assembler, JsonlWriter(raw_dir, output_filename="${rank}.jsonl")],
    )


class TableRowPartitioner(SourceReader):
    """Partition stage reader: table rows -> one small Document per row, tagged with its bucket.

    Subclasses implement :meth:`row_documents` (a row -> Documents with ``metadata['group']``, the grouping
    key; none after counting why the row was left out). Rows are counted as ``rows``; the assembling stage counts the
    source's ``records`` and ``documents``.
    """

    name = "🪣 partition rows"
    report_name = "partition-{rank:05d}.json"  # beside the assembling stage's reports, under its own name

    def __init__(
        self,
        inputs: list[str],
        cfg: Any = None,
        buckets: int = 1,
        report_dir: str | None = None,
        exclusion_dir: str | None = None,
    ):
        super().__init__(inputs, cfg, report_dir, exclusion_dir)
        self.buckets = buckets
        self._origin: str | None = None

    def units(self) -> list[tuple[str, Any]]:
        return table_units(self.inputs, self.cfg)

    def row_documents(self, row: dict, where: str) -> list[Document]:
        raise NotImplementedError

    def schema_problem(self, row: dict) -> str | None:
        """Why this table's columns cannot give the reader's fields (None: they can); checked on a file's first row."""
        return None

    def row_error(self, reason: str, where: str, detail: str = "") -> None:
        """A row left out (row_documents): counted against the input it came from."""
        self.error(reason, where, detail, self._origin)

    def read_unit(self, unit: Any, origin: str) -> Iterator[Document]:
        self._origin = origin
        first = True
        for where, row in readable_rows(self, unit, origin, "rows"):
            if not isinstance(row, dict):
                self.error("bad_row", where, f"a row is an object, got {type(row).__name__}", origin)
                continue
            if first:
                first = False
                problem = self.schema_problem(row)
                if problem:  # every row of the file has these columns: one error naming the file, not one a row
                    self.error("schema_mismatch", unit_name(unit), f"input {origin}: {problem}", origin)
                    return
            try:
                docs = self.row_documents(row, where)
            except Exception as e:  # noqa: BLE001 - one bad row costs that row only, counted with its reason
                self.error("bad_row", where, f"{type(e).__name__}: {e}", origin)
                continue
            for doc in docs:
                doc.metadata["bucket"] = bucket_of(doc.metadata["group"], self.buckets)
                yield doc


def iter_bucket(rows_dir: str, bucket: str) -> Iterator[dict]:
    """Every row written to one bucket, from all partition tasks (files in name order, rows in file order)."""
    folder = get_datafolder(rows_dir)
    if not folder.isdir(bucket):
        return
    for rel in sorted(folder.list_files(bucket, recursive=False)):
        with folder.open(rel, "rb") as raw, gzip.open(raw, "rb") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    row.setdefault("text", "")  # datatrove's writer leaves out an empty text (an empty file)
                    yield row


def grouped(rows: Iterator[dict]) -> list[tuple[str, list[dict]]]:
    """Rows of one bucket grouped by their key, groups sorted by key (the order does not depend on tasks)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["metadata"]["group"], []).append(r)
    return sorted(groups.items())


def bucket_units(rows_dir: str, buckets: int) -> list[tuple[str, str]]:
    """The assembling stage's units: every bucket, as (rows folder, bucket name)."""
    return [(rows_dir, f"{b:05d}") for b in range(buckets)]


class BucketAssembler:
    """Mixin for an assembling stage's reader (before the source reader class in the bases): its units are
    the buckets; subclasses read one with ``grouped(iter_bucket(self.rows_dir, bucket))``."""

    def __init__(
        self,
        rows_dir: str,
        buckets: int,
        cfg: Any = None,
        report_dir: str | None = None,
        exclusion_dir: str | None = None,
    ):
        super().__init__([rows_dir], cfg, report_dir, exclusion_dir)  # type: ignore[call-arg]
        self.rows_dir = rows_dir
        self.buckets = buckets

    def units(self) -> list[tuple[str, str]]:
        return bucket_units(self.rows_dir, self.buckets)

    def unit_path(self, unit: str) -> None:
        return None

    def _write_report(self, rank: int) -> None:
        self._per_input: dict[str, Any] = {}  # the inputs are the table files, reported by the partition stage
        super()._write_report(rank)  # type: ignore[misc]
