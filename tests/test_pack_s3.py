"""`midtrain pack` in object storage: documents a prep wrote to a bucket of a real S3 API server (moto's server
mode on loopback, the fixture of test_sources_s3.py) are tokenized and packed into shards in another bucket,
byte-identical to the same pack run on local directories; a rerun resumes from the completion markers in
the bucket. The trainer refuses shards in a bucket with the command that copies them to a filesystem."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_sources_s3 import put_parquet, s3  # noqa: F401 - s3 is the loopback S3 server fixture
from test_sources_tables import NO_CURATION, prep, stack_rows

from midtrain.cli import main

PACK = ["--seq-length", "256", "tasks=2", "tokenize_tasks=2", "valid_fraction=0.2", "seed=5"]


def repo_files(i: int) -> dict[str, str]:
    """A repository of a few Python files, one longer than a 256-token sequence (it is split)."""
    return {
        f"pkg{i}/mod{j}.py": "".join(f"def f_{i}_{j}_{k}(x):\n    return x * {k} + {j}\n\n" for k in range(4 + 9 * j))
        for j in range(3)
    }


def shard_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.glob("*/*"))
        if p.name.endswith((".bin", ".idx"))
    }


def stamps(fs, prefix: str) -> dict[str, object]:
    """Modification time of every object under ``prefix`` except datatrove's per-run logs."""
    fs.invalidate_cache()
    return {k: fs.info(k)["LastModified"] for k in fs.find(prefix) if "/logs/" not in k}


def test_pack_reads_a_bucket_writes_shards_to_a_bucket_and_resumes_there(s3, tmp_path):
    rows = [r for i in range(6) for r in stack_rows(f"acme/p{i}", repo_files(i), f"{i:x}" * 40, ["MIT"])]
    for name in ("tables", "prepared", "shards"):
        s3.mkdir(name)
    put_parquet(s3, "tables/stack/train-00000.parquet", rows)
    assert (
        prep("repos", *NO_CURATION, "--input", "s3://tables/stack", "--output", "s3://prepared/repos", "--tasks", 2)
        == 0
    )
    local_prep = tmp_path / "prep" / "repos"  # the same documents on disk
    s3.get("prepared/repos/documents", str(local_prep / "documents"), recursive=True)
    s3.get("prepared/repos/stats.json", str(local_prep / "stats.json"))
    assert len(list((local_prep / "documents").glob("*.jsonl.gz"))) == 2

    assert main(["pack", "--input", str(local_prep), "--output", str(tmp_path / "local_shards"), *PACK]) == 0
    assert main(["pack", "--input", "s3://prepared/repos", "--output", "s3://shards/run", *PACK]) == 0

    # the tokenize cache sits beside the documents in the bucket, with its completion stamp
    cached = [k for k in s3.find("prepared/repos/tokenized") if "/logs/" not in k]
    assert sum(k.endswith("/complete.json") for k in cached) == 1 and sum(k.endswith("00001.json") for k in cached) == 1
    got = tmp_path / "from_bucket"
    s3.get("shards/run", str(got), recursive=True)
    local = shard_files(tmp_path / "local_shards")
    assert set(local) == {f"{s}/{t:05d}.{e}" for s in ("train", "valid") for t in (0, 1) for e in ("bin", "idx")}
    assert shard_files(got) == local  # byte-identical
    m, m_local = (json.loads((d / "manifest.json").read_text()) for d in (got, tmp_path / "local_shards"))
    assert m["inputs"] == ["s3://prepared/repos"] and m["tokenized"][0].startswith("s3://prepared/repos/tokenized/")
    assert m["splits"]["train"]["tasks"][0]["inputs"][0].startswith("s3://prepared/repos/tokenized/")
    for key in ("sequences", "tokens", "padding_tokens", "split_documents", "sources", "tokenizer"):
        assert m[key] == m_local[key], key
    assert m["split_documents"] > 0 and m["splits"]["valid"]["tokens"] > 0

    # The data card of shards in a bucket: written there, with the card of the input read from the bucket.
    assert main(["inspect", "s3://shards/run", "--card"]) == 0
    card = json.loads(s3.cat("shards/run/datacard.json"))
    assert s3.exists("shards/run/datacard.md") and s3.exists("shards/run/datacard.png")
    assert main(["inspect", str(tmp_path / "local_shards"), "--card"]) == 0
    card_local = json.loads((tmp_path / "local_shards" / "datacard.json").read_text())
    assert card["by_source"] == card_local["by_source"] and card["inputs"][0]["prep_dir"] == "s3://prepared/repos"
    for key in ("documents", "tokens", "tokens_exact", "by_language", "top_repositories"):
        assert card["inputs"][0][key] == card_local["inputs"][0][key], key
    assert card["inputs"][0]["documents"] == 6 and card["inputs"][0]["tokens_exact"]
    for name in ("datacard.json", "datacard.md", "datacard.png"):
        s3.rm(f"shards/run/{name}")

    # A copy on a filesystem is what the trainer reads.
    from midtrain.formats.shard_reader import PackedDataset

    assert len(PackedDataset(got)) == m["sequences"]
    with pytest.raises(ValueError, match="cannot be memory-mapped.*aws s3 sync s3://shards/run"):
        PackedDataset("s3://shards/run")

    # Rerun of a finished output: nothing is recomputed or rewritten (bucket LastModified has 1 s resolution).
    before_shards, before_cache = stamps(s3, "shards/run"), stamps(s3, "prepared/repos/tokenized")
    time.sleep(1.5)
    assert main(["pack", "--input", "s3://prepared/repos", "--output", "s3://shards/run", *PACK]) == 0
    assert stamps(s3, "shards/run") == before_shards and stamps(s3, "prepared/repos/tokenized") == before_cache

    # An interrupted run: pack task 1 and the manifest never finished. The rerun finds task 0's completion
    # marker in the bucket and redoes only task 1 and the manifest.
    run_key = m["run_key"]
    s3.rm([k for k in s3.find("shards/run") if "/00001." in k and "/logs/" not in k])
    s3.rm(f"shards/run/logs/{run_key}/completions/00001")
    s3.rm(f"shards/run/logs/{run_key}-manifest", recursive=True)
    s3.rm("shards/run/manifest.json")
    time.sleep(1.5)
    assert main(["pack", "--input", "s3://prepared/repos", "--output", "s3://shards/run", *PACK]) == 0
    after = stamps(s3, "shards/run")
    assert set(after) == set(before_shards)
    changed = {k for k in after if after[k] != before_shards[k]}
    assert changed == {k for k in after if "/00001." in k} | {"shards/run/manifest.json"}
    assert stamps(s3, "prepared/repos/tokenized") == before_cache  # the tokenize cache was reused
    s3.get("shards/run", str(tmp_path / "resumed"), recursive=True)
    assert shard_files(tmp_path / "resumed") == local


def test_the_trainer_names_the_copy_to_make_for_shards_in_a_bucket(capsys):
    assert main(["train", "demo_tiny", "data.path=s3://shards/run/"]) == 2
    err = capsys.readouterr().err
    assert "config error: data.path: s3://shards/run/ is in object storage" in err
    assert "`aws s3 sync s3://shards/run /lustre/shards`" in err and "data.path=/lustre/shards" in err
