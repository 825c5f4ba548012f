"""Held-out text kept out of training by content, not by id: a held-out trajectory quoted in a commit diff (as
the commit that vendored the real traces quotes django__django-11163 whole) is dropped by the n-gram step with
its reason, and the packed-shard scan finds it where the id check sees nothing."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from curate_helpers import count, curate, doc_row, write_raw
from datatrove.data import Document
from pack_helpers import commit_doc, pack_manifest, write_prep

from midtrain.curate.decontam import NgramIndex, scored_text
from midtrain.curate.leak_scan import MAX_OVERLAP, describe, heldout_index, scan_against_probe_data, scan_shards
from midtrain.curate.stages import CurationConfig
from midtrain.eval.report import content_statement
from midtrain.formats.documents import write_jsonl_gz
from midtrain.formats.trace_split import shard_instances
from midtrain.pack.pack_step import PackConfig

TRACE = Path(__file__).resolve().parents[1] / "data_prep" / "samples" / "real_traces" / "django__django-11163.traj.json"
HELD = "django__django-11163"


def _assistant_text() -> str:
    messages = json.loads(TRACE.read_text())["messages"]
    return "\n\n".join(m["content"] for m in messages if m["role"] == "assistant")


def _vendoring_diff(text: str) -> str:
    """A commit that adds the trajectory file: every line of it as a `+` line of the diff."""
    body = "\n".join(f"+{ln}" for ln in text.splitlines())
    return (
        "commit 1234\n\nVendor real traces\n\ndiff --git a/data/t.json b/data/t.json\n"
        f"--- /dev/null\n+++ b/data/t.json\n@@ -0,0 +1 @@\n{body}\n"
    )


def test_scored_text_is_the_loss_spans_and_the_index_discards_a_shared_template():
    doc = {"id": "t", "text": "SYSTEM PROMPT " * 20 + "answer", "metadata": {"loss_spans": [[0, 7], [280, 286]]}}
    assert scored_text(doc) == "SYSTEM \nanswer"
    idx = NgramIndex(5)
    assert idx.add("a", "one two three four five six seven") == 3
    assert idx.first_hit("x one two three four five y") == ("one two three four five", "a")
    assert idx.discard("zero one two three four five six") == 2  # the template's two grams go
    assert idx.first_hit("one two three four five") is None and len(idx) == 1


def test_heldout_text_in_a_commit_diff_is_dropped_by_content_with_its_reason(tmp_path):
    held = tmp_path / "heldout.jsonl"
    held.write_text(json.dumps({"id": HELD, "text": _assistant_text()}) + "\n")
    write_raw(
        tmp_path / "raw",
        [
            doc_row(_vendoring_diff(_assistant_text()), "commit-vendor", source="commit", repo="me/midtrain"),
            doc_row("commit 99\n\nFix a typo\n\n-teh\n+the\n" * 3, "commit-typo", source="commit", repo="me/midtrain"),
        ],
    )
    cfg = CurationConfig().apply_overrides([f"decontam.heldout=[{held}]", "dedup.enabled=false"])
    docs, counts, _ = curate(tmp_path, cfg, source="commit")
    assert [d["id"] for d in docs] == ["commit-typo"]
    assert count(counts, "n-grams", "dropped_heldout_ngram") == 1
    assert count(counts, "n-grams", "dropped_swebench_ngram") == 0


@pytest.fixture(scope="module")
def leaked_shards(tmp_path_factory):
    """A commit pack that trained on the held-out trajectory (quoted in a diff), and one that did not."""
    tmp = tmp_path_factory.mktemp("leak")
    leaked = Document(
        text=_vendoring_diff(_assistant_text()),
        id="commit-vendor",
        metadata={"source": "commit", "repo": "me/midtrain", "license": "Apache-2.0"},
    )
    rng = random.Random(0)
    prep = write_prep(tmp / "commits", [leaked, *(commit_doc(i, rng) for i in range(6))])
    pack_manifest(PackConfig(seq_length=512, valid_fraction=0.0), [prep], tmp / "shards")
    clean = write_prep(tmp / "clean", [commit_doc(i, rng) for i in range(6)])
    pack_manifest(PackConfig(seq_length=512, valid_fraction=0.0), [clean], tmp / "clean_shards")
    return tmp / "shards", tmp / "clean_shards"


def test_shard_scan_finds_a_leak_the_id_check_misses(leaked_shards):
    shards, clean = leaked_shards
    assert HELD not in shard_instances(shards)  # the old check: ids only, sees nothing
    index = heldout_index([{"id": HELD, "text": _assistant_text()}])
    scan = scan_shards(shards, index, None)
    assert scan["leak"] and scan["overlap"] > 0.5 > MAX_OVERLAP
    assert scan["sequences_with_overlap"] >= 1 and set(scan["by_heldout_document"]) == {HELD}
    assert "LEAK" in describe(scan)

    ok = scan_shards(clean, index, None)
    assert not ok["leak"] and ok["heldout_ngrams_found"] == 0 and ok["sequences_with_overlap"] == 0


@pytest.mark.parametrize("bad", [{"id": "x"}, {"id": "x", "text": 3}])
def test_a_heldout_row_without_text_is_refused_naming_the_file(tmp_path, bad):
    from midtrain.curate.decontam import DecontamConfig, SweBenchNgramFilter

    held = tmp_path / "h.jsonl"
    held.write_text(json.dumps(bad) + "\n")
    step = SweBenchNgramFilter(DecontamConfig(heldout=[str(held)]))
    with pytest.raises(ValueError, match="h.jsonl.*'text'"):
        step._load()


def test_probe_self_check_scans_by_content_less_the_shared_template_and_the_report_says_so(tmp_path, leaked_shards):
    shards, clean = leaked_shards
    system = "You are a helpful assistant that can interact with a computer shell to solve programming tasks. " * 3
    answer = _assistant_text()
    held = {"id": HELD, "text": system + answer, "metadata": {"loss_spans": [[0, len(system + answer)]]}}
    other = {"id": "acme__x-1", "text": system + "THOUGHT: done", "metadata": {}}
    for split, doc in (("valid_docs", held), ("train_docs", other)):
        write_jsonl_gz_docs(tmp_path / "data" / split, doc)
    scans = scan_against_probe_data(tmp_path / "data", [str(shards), str(clean)], None)
    assert [s["leak"] for s in scans] == [True, False]
    # the system prompt every trace repeats is not counted as held-out text
    assert scans[0]["heldout_ngrams"] < len(heldout_index([held])) and scans[1]["heldout_ngrams_found"] == 0
    lines = "\n".join(content_statement({"a": {"content_scan": scans}}))
    assert "**Held-out text found in training shards by content** (1 of 2" in lines
    assert "no training shard holds" in "\n".join(content_statement({"a": {"content_scan": scans[1:]}}))
    assert "not scanned" in content_statement({"a": {}})[1]


def write_jsonl_gz_docs(prep_dir: Path, doc: dict) -> None:
    (prep_dir / "documents").mkdir(parents=True)
    write_jsonl_gz(prep_dir / "documents" / "00000.jsonl.gz", [doc])


def test_inspect_heldout_prints_the_overlap_and_fails_on_a_leak(tmp_path, leaked_shards, capsys):
    from midtrain.cli import main

    shards, clean = leaked_shards
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": HELD, "text": _assistant_text()}) + "\n")
    assert main(["inspect", str(shards), "--heldout", str(held)]) == 1
    assert "LEAK" in capsys.readouterr().out
    assert main(["inspect", str(clean), "--heldout", str(held)]) == 0
    assert "held-out 13-grams (0.00%) in 0 of" in capsys.readouterr().out
