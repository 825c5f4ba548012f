"""The documents format's one writer and reader (midtrain/formats/documents.py) on a local file and in object
storage: a rewrite gives the same bytes, and what is written reads back as written."""

from __future__ import annotations

from collections import Counter

from midtrain.formats.documents import read_jsonl, write_jsonl_gz
from midtrain.locations import as_path

ROWS = [{"text": "def f():\n    return 'é'\n", "id": "a", "metadata": {"source": "repo", "license": "MIT"}}]


def test_written_documents_read_back_with_the_same_bytes_every_time(tmp_path):
    write_jsonl_gz(tmp_path / "a.jsonl.gz", ROWS)
    first = (tmp_path / "a.jsonl.gz").read_bytes()
    write_jsonl_gz(str(tmp_path / "a.jsonl.gz"), iter(ROWS))  # a rerun (say, after a preemption)
    assert (tmp_path / "a.jsonl.gz").read_bytes() == first  # no timestamp in the gzip header
    assert [row for _, row in read_jsonl(tmp_path / "a.jsonl.gz")] == ROWS
    write_jsonl_gz(tmp_path / "empty.jsonl.gz", [])  # a task with no document: a valid, empty gzip file
    drops: Counter = Counter()
    assert list(read_jsonl(tmp_path / "empty.jsonl.gz", drops)) == [] and not drops


def test_documents_in_object_storage_are_written_and_read_the_same_way():
    remote = as_path("memory://bucket/prep/documents/00000.jsonl.gz")
    write_jsonl_gz(remote, ROWS)
    assert [row for _, row in read_jsonl(remote)] == ROWS
