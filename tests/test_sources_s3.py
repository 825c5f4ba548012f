"""Table inputs in object storage: `midtrain prep` reads Parquet from a bucket of a real S3 API server
(moto's server mode, started on loopback for the test) through datatrove's fsspec data folders."""

from __future__ import annotations

import io
import json
import time
import urllib.request

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datatrove.io import DataFolder
from sources_fixtures import read_documents
from test_sources_tables import FILES, NO_CURATION, docs_by_id, prep, stack_rows, write_parquet

moto_server = pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")


@pytest.fixture
def s3(monkeypatch):
    """An S3 endpoint on 127.0.0.1 (a real HTTP server speaking the S3 API), emptied (moto keeps its state per
    process), and an s3fs client for it."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }.items():
        monkeypatch.setenv(key, value)
    urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST"))
    # fsspec caches filesystems by their arguments, not the endpoint: forget those of an earlier server
    # (datatrove's data folders wrap one, and are cached by their path)
    for cls in (s3fs.S3FileSystem, DataFolder):
        cls.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    yield fs
    for cls in (s3fs.S3FileSystem, DataFolder):
        cls.clear_instance_cache()
    server.stop()


def put_parquet(fs, url: str, rows: list[dict]) -> None:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf, row_group_size=4)
    with fs.open(url, "wb") as f:
        f.write(buf.getvalue())


def test_prep_reads_a_parquet_table_from_a_bucket(s3, tmp_path):
    rows = stack_rows("acme/proj", FILES, "a" * 40, ["MIT"]) + stack_rows("zed/o", {"x.py": "x = 1\n"}, "b" * 40, [])
    s3.mkdir("tables")
    put_parquet(s3, "tables/stack/data/train-00000.parquet", rows[::2])
    put_parquet(s3, "tables/stack/data/train-00001.parquet", rows[1::2])
    write_parquet(tmp_path / "local" / "train-00000.parquet", rows[::2])
    write_parquet(tmp_path / "local" / "train-00001.parquet", rows[1::2])

    out = tmp_path / "from_s3"
    assert prep("repos", *NO_CURATION, "--input", "s3://tables/stack/data", "--output", out, "--tasks", 2) == 0
    assert prep("repos", *NO_CURATION, "--input", tmp_path / "local", "--output", tmp_path / "from_disk") == 0
    from_s3 = docs_by_id(read_documents(out / "raw"))
    assert from_s3 == docs_by_id(read_documents(tmp_path / "from_disk" / "raw"))
    assert set(from_s3) == {"repo:acme/proj@aaaaaaaaaaaa", "repo:zed/o@bbbbbbbbbbbb"}
    stats = json.loads((out / "stats.json").read_text())
    assert stats["settings"]["inputs"] == ["s3://tables/stack/data"]  # the URL is kept, not made a local path
    assert (
        set(stats["inputs"]) == {"s3://tables/stack/data"} and stats["inputs"]["s3://tables/stack/data"]["errors"] == 0
    )

    # a prefix without tables is named in stats.json, and the command fails
    assert prep("repos", *NO_CURATION, "--input", "s3://tables/nothing-here", "--output", tmp_path / "none") == 1
    stats = json.loads((tmp_path / "none" / "stats.json").read_text())
    assert stats["unreadable_inputs"] == ["s3://tables/nothing-here"]
    assert stats["errors"][0]["reason"] == "missing_input" and stats["errors"][0]["where"] == "s3://tables/nothing-here"


def bucket_documents(fs, prefix: str) -> list[dict]:
    import gzip

    docs: list[dict] = []
    for key in sorted(fs.find(prefix)):
        if key.endswith(".jsonl.gz"):
            with fs.open(key, "rb") as raw, gzip.open(raw, "rt") as fh:
                docs.extend(json.loads(line) for line in fh if line.strip())
    return docs


def test_prep_writes_documents_to_a_bucket_and_resumes_there(s3, tmp_path):
    """Table in one bucket -> documents, stats and completion markers in another; curation on (dedup included).
    A rerun finds every stage complete in the bucket and rewrites nothing."""
    other = {"calc.py": "".join(f"def add_{i}(a, b):\n    return a + b + {i}\n\n\n" for i in range(40))}
    rows = stack_rows("acme/proj", FILES, "a" * 40, ["MIT"]) + stack_rows("zed/o", other, "b" * 40, [])
    rows += stack_rows("fork/proj", FILES, "c" * 40, ["MIT"])  # an exact copy: dedup drops one of the two
    s3.mkdir("tables")
    s3.mkdir("prepared")
    put_parquet(s3, "tables/stack/train-00000.parquet", rows)
    write_parquet(tmp_path / "local" / "train-00000.parquet", rows)

    assert (
        prep(
            "repos",
            "redact.enabled=false",
            "--input",
            "s3://tables/stack",
            "--output",
            "s3://prepared/repos",
            "--tasks",
            2,
        )
        == 0
    )
    assert (
        prep(
            "repos",
            "redact.enabled=false",
            "--input",
            tmp_path / "local",
            "--output",
            tmp_path / "local_out",
            "--tasks",
            2,
        )
        == 0
    )
    in_bucket = bucket_documents(s3, "prepared/repos/documents")
    local = read_documents(tmp_path / "local_out")
    assert docs_by_id(in_bucket) == docs_by_id(local) and len(in_bucket) == 2  # one of the two copies is gone
    stats = json.loads(s3.cat("prepared/repos/stats.json"))
    assert stats["documents_out"] == 2 and stats["complete"]
    assert [k for k in stats["drops"] if k.endswith("dropped_duplicate_repo")]
    assert s3.find("prepared/repos/logs/source_rows/completions") and s3.find("prepared/repos/logs/source/completions")

    # objects are compared by modification time: a rewrite would give the same bytes (reproducible gzip)
    def stamps() -> dict:  # prep.json (the settings marker) is rewritten on every launch by design
        s3.invalidate_cache()
        return {
            k: s3.info(k)["LastModified"]
            for k in s3.find("prepared/repos")
            if "/logs/" not in k and not k.endswith("prep.json")
        }

    before = stamps()
    assert len(before) > 10
    time.sleep(1.5)
    assert (
        prep(
            "repos",
            "redact.enabled=false",
            "--input",
            "s3://tables/stack",
            "--output",
            "s3://prepared/repos",
            "--tasks",
            2,
        )
        == 0
    )
    assert stamps() == before  # nothing rewritten: every stage found its completion markers in the bucket


def test_pulls_read_from_a_bucket_like_from_disk(s3, tmp_path):
    """pulls already read JSONL/Parquet tables: from a URL they go through the same table layer."""
    from sources_fixtures import SAMPLES

    sample = SAMPLES / "pulls" / "sample_prs.jsonl"
    s3.mkdir("prs")
    s3.put(str(sample), "prs/2024/sample_prs.jsonl")
    assert prep("pulls", *NO_CURATION, "--input", "s3://prs/2024", "--output", tmp_path / "s3") == 0
    assert prep("pulls", *NO_CURATION, "--input", sample, "--output", tmp_path / "disk") == 0
    from_s3 = docs_by_id(read_documents(tmp_path / "s3" / "raw"))
    assert from_s3 == docs_by_id(read_documents(tmp_path / "disk" / "raw")) and len(from_s3) == 2
