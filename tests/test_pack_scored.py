"""What a pack leaves out because of what is scored: pieces with no loss target (they would train and score
nothing) and training documents that quote a validation document (the proxy's held-out loss would measure memory).
Both are counted, and nothing else is lost."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest
from datatrove.data import Document
from pack_helpers import pack_manifest, write_prep

from midtrain.curate.leak_scan import scan_shards, split_index
from midtrain.formats.shard_reader import PackedDataset
from midtrain.formats.tokenizer import load_tokenizer
from midtrain.pack.pack_step import LOSS_FREE, PackConfig
from midtrain.pack.valid_overlap import REASON

S = 128


def _prose(rng: random.Random, n: int) -> str:
    """N words no other text shares (a 13-gram of them is in no other document by chance; letters only: the
    n-gram rule reads every digit as 0)."""
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=7)) for _ in range(n))


def _doc_ids(out: Path, split: str) -> set[str]:
    return {i for f in (out / split).glob("*.docs.txt") for i in f.read_text().split()}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    rng = random.Random(5)
    root = tmp_path_factory.mktemp("prep")
    files = {f"org/r{i}": _prose(rng, 120) for i in range(4)}
    repos = [
        Document(text=text, id=f"repo:{name}", metadata={"source": "repo", "repo": name, "license": "MIT"})
        for name, text in files.items()
    ]
    # each commit of the one commits repository quotes one repository's file in its diff, one quotes none
    commits = [
        Document(
            text=f"commit {i:012x}\n\n{_prose(rng, 20)}\n+{files[name]}\n",
            id=f"commit:{i}",
            metadata={"source": "commit", "repo": "org/history", "license": "MIT", "quotes": name},
        )
        for i, name in enumerate(sorted(files))
    ]
    commits.append(
        Document(
            text=f"commit {99:012x}\n\n{_prose(rng, 60)}\n",
            id="commit:99",
            metadata={"source": "commit", "repo": "org/history", "license": "MIT"},
        )
    )
    dirs = [write_prep(root / "repos", repos), write_prep(root / "commits", commits)]
    return dirs, {d.id: d.metadata.get("quotes") for d in commits}


@pytest.mark.parametrize("ngrams", [13, 0])
def test_a_training_document_quoting_a_validation_document_is_dropped_and_counted(inputs, tmp_path, ngrams):
    dirs, quotes = inputs
    out = tmp_path / "shards"
    cfg = PackConfig(seq_length=S, valid_fraction=0.3, seed=3, valid_decontam_ngrams=ngrams)
    m = pack_manifest(cfg, dirs, out)
    valid, train = _doc_ids(out, "valid"), _doc_ids(out, "train")
    valid_repos = {d.removeprefix("repo:") for d in valid if d.startswith("repo:")}
    assert valid_repos and len(valid_repos) < 4  # the run's validation repositories: some, not all
    # a repository's file and the commit quoting it share their 13-grams: where one validates, the other, when
    # it would train, is dropped (a validation commit's quote drops the training repository's file too)
    groups = [{f"repo:{name}", c} for c, name in quotes.items() if name]
    quoting = set().union(*(g - valid for g in groups if g & valid))
    assert quoting and any(c.startswith("commit:") for c in quoting)
    scan = scan_shards(out, split_index(out, "valid", load_tokenizer()), load_tokenizer())
    if not ngrams:  # off: the quotes train, and the content scan sees them
        assert quoting <= train and m["valid_overlap"] is None
        assert scan["heldout_ngrams_found"] > 0
        return
    v = m["valid_overlap"]
    assert not quoting & train
    assert v["reason"] == REASON and v["documents"] == len(quoting) == sum(v["documents_by_source"].values())
    assert {e["document"] for e in v["examples"]} == quoting
    assert all(e["validation_document"] in valid for e in v["examples"])
    # what shares nothing with a validation document trains, and the scan finds nothing left
    assert {c for c in [*quotes, *(f"repo:{r}" for r in quotes.values() if r)] if c not in quoting | valid} <= train
    assert scan["heldout_ngrams_found"] == 0 and scan["heldout_ngrams"] > 0
    # nothing else lost: every input token is in a split or counted as dropped
    total = m["splits"]["train"]["tokens"] + m["splits"]["valid"]["tokens"]
    assert total - m["splits"]["train"]["repeated_header_tokens"] + v["tokens"] == m["input_tokens"]
    assert m["sources"]["commit"]["available_tokens"] == m["sources"]["commit"]["tokens"]


def test_a_piece_with_no_loss_target_is_not_packed_and_is_counted(tmp_path):
    rng = random.Random(1)
    user = "<|im_start|>user\nfix it<|im_end|>\n"
    tool = "<|im_start|>user\n" + "\n".join(_prose(rng, 8) for _ in range(40)) + "<|im_end|>\n"
    answer = "<|im_start|>assistant\n" + _prose(rng, 10) + "<|im_end|>\n"
    text = user + tool + answer
    spans = [[len(user) + len(tool) + len("<|im_start|>assistant\n"), len(text)]]
    doc = Document(text=text, id="trace:t1", metadata={"source": "trace", "loss_spans": spans})
    plain = Document(text=_prose(rng, 30), id="repo:x", metadata={"source": "repo", "repo": "org/x"})
    out = tmp_path / "shards"
    cfg = PackConfig(seq_length=S, valid_fraction=0.0, heldout_fraction=0.0)
    m = pack_manifest(cfg, [write_prep(tmp_path / "in", [doc, plain])], out)
    # the trace validates or trains (the held-out draw of its instance): its loss-free pieces go nowhere
    split = "train" if m["sources"]["trace"]["tokens"] else "valid"
    lf = m["splits"][split]["loss_free"]
    assert lf["reason"] == LOSS_FREE and lf["pieces"] >= 2 and lf["tokens"] > 0
    assert m["splits"]["train" if split == "valid" else "valid"]["loss_free"]["pieces"] == 0
    ds = PackedDataset(out, split)
    assert len(ds) >= 1
    for i in range(len(ds)):
        s = ds[i]
        for p, row in enumerate(ds.pieces(i)):
            if row["source"] >= 0:  # every packed piece trains something
                a, b = int(s["cu_seqlens"][p]), int(s["cu_seqlens"][p + 1])
                assert s["loss_mask"][a:b].any() or b - a == 1
    # the trace's answer and the plain document are all there, and the dropped tokens are counted
    kept = m["sources"]["trace"]["tokens"] + m["sources"]["trace"]["valid_tokens"]
    assert (
        kept > 0 and m["splits"]["train"]["tokens"] + m["splits"]["valid"]["tokens"] + lf["tokens"] == m["input_tokens"]
    )
    stats = json.loads(next((out / split).glob("*.stats.json")).read_text())
    assert stats["loss_free"]["pieces"] == lf["pieces"]
