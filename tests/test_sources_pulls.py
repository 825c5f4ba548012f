"""pulls source: the shipped sample, Parquet and saved-HF-dataset inputs, bad records."""

from __future__ import annotations

import json

from sources_fixtures import SAMPLES, run_reader

from midtrain.sources.pulls import PullReader

SAMPLE = SAMPLES / "pulls" / "sample_prs.jsonl"


def _records() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


def test_sample_rendered_anonymised_without_bots():
    reader = PullReader([str(SAMPLE)])
    docs = run_reader(reader)
    assert [d.id for d in docs] == ["pr:acme/minicalc#12", "pr:acme/minicalc#14"]  # dependabot's PR dropped
    pr = docs[0].text
    for login in ["alice-w", "bob-k", "carol-dev", "codecov"]:
        assert login not in pr
    assert "Coverage increased" not in pr  # bot comment text dropped
    assert pr.startswith(
        "Title: Fix division by zero in evaluate()\nRepository: acme/minicalc\nState: merged (main <- fix-div0)"
    )
    assert "user_1 opened this pull request" in pr and "Thanks user_1!" in pr and "cc user_2" in pr
    # diffs before the conversation; the conversation in time order with review states and inline comments
    order = [
        pr.index(s)
        for s in [
            "--- minicalc/eval.py",
            "--- tests/test_eval.py",
            "reviewed (CHANGES_REQUESTED)",
            "on tests/test_eval.py line 4:",
            "user_2 commented",
            "reviewed (APPROVED)",
        ]
    ]
    assert order == sorted(order)
    assert "This PR is stale." not in docs[1].text and "[no textual diff: binary or too large]" in docs[1].text
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["dropped/bot_author"] == 1 and stats["skip/bot_comment"] == 2 and stats["records"] == 3
    assert docs[0].metadata | {} == docs[0].metadata and docs[0].metadata["license"] == "MIT"
    assert docs[0].metadata["source"] == "pr" and docs[0].metadata["state"] == "merged"


def test_parquet_and_hf_dataset_inputs_give_the_same_documents(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [r for r in _records() if r["number"] == 12]  # one consistent schema for Arrow
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "prs.parquet")
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "hf"))
    jsonl = tmp_path / "one.jsonl"
    jsonl.write_text(json.dumps(records[0]) + "\n")
    texts = [
        [d.text for d in run_reader(PullReader([str(p)]))] for p in (jsonl, tmp_path / "prs.parquet", tmp_path / "hf")
    ]
    assert len(texts[0]) == 1
    assert texts[0] == texts[1] == texts[2]


def test_bad_records_are_counted_and_reported(tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = json.dumps(_records()[0]).encode()
    bad.write_bytes(
        b"\n".join(
            [
                good,
                b"{not json",
                b'{"title": "caf\xe9"}',
                b"[1, 2]",
                json.dumps({"title": "x", "files": 3}).encode(),
                good,
                b'{"title": "lone \\ud800 surrogate", "number": 99, "files": [{"filename": "a.py", "patch": "+a"}]}',
            ]
        )
        + b"\n"
    )
    reader = PullReader([str(bad)], report_dir=str(tmp_path / "reports"))
    docs = run_reader(reader)
    assert len(docs) == 2
    errors = {k: v.total for k, v in reader.stats.stats.items() if k.startswith("error/")}
    assert errors == {
        "error/malformed_json": 1,
        "error/invalid_utf8": 1,
        "error/bad_record": 2,
        "error/invalid_unicode": 1,
    }
    report = json.loads((tmp_path / "reports" / "00000.json").read_text())
    assert [e["where"] for e in report["errors"]] == [f"{bad}:{i}" for i in (2, 3, 4, 5)] + ["pr:unknown#99"]
    assert report["inputs"][str(bad)] == {"documents": 2, "errors": 5}
