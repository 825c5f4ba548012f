"""The tokenize step on its own: EOS per document, char spans -> token masks, file boundaries, drops counted."""

from __future__ import annotations

import json

import numpy as np
import pytest
from datatrove.data import Document

from midtrain.formats.tokenizer import EOS_TOKEN, default_tokenizer_path, load_tokenizer
from midtrain.pack.tokenize import TokenizedShard, TokenizeStep, spans_to_mask


@pytest.fixture(scope="module")
def tok_file():
    return str(default_tokenizer_path())


def _run(tmp_path, docs, tok_file, boundaries=None):
    step = TokenizeStep(str(tmp_path), tok_file, EOS_TOKEN, boundaries or {})
    out = step.run(iter(docs), rank=0, world_size=1)
    if out is not None:
        list(out)
    return TokenizedShard(tmp_path / "00000")


def test_tokens_masks_bounds_and_drops(tmp_path, tok_file):
    tok = load_tokenizer(tok_file)
    user, answer = "<|im_start|>user\nhé? ünïcode<|im_end|>\n", "<|im_start|>assistant\nçà va 🚀<|im_end|>\n"
    text = user + answer
    repo = "<|repo_name|>o/r\n<|file_sep|>a.py\nx = 1\n<|file_sep|>b.py\ny = 2\n"
    docs = [
        Document(text=text, id="t", metadata={"source": "trace", "loss_spans": [[len(user), len(text)]]}),
        Document(
            text=repo,
            id="r",
            metadata={"source": "repo", "file_offsets": [repo.index("<|file_sep|>"), repo.index("<|file_sep|>b")]},
        ),
        Document(text="plain text, no source", id="p", metadata={}),
        Document(text="bad spans", id="bad", metadata={"source": "trace", "loss_spans": [[5, 900]]}),
        Document(text="", id="empty", metadata={"source": "trace"}),
    ]
    shard = _run(tmp_path, docs, tok_file)
    assert [d["id"] for d in shard.docs] == ["t", "r", "p"]
    assert shard.info["dropped"] == {"bad_loss_spans": 1, "empty_text": 1}
    assert shard.info["tokens_by_source"].keys() == {"trace", "repo", "unknown"}
    ids = shard.tokens(0).tolist()
    assert ids[-1] == tok.convert_tokens_to_ids(EOS_TOKEN) and tok.decode(ids[:-1]) == text
    mask = shard.mask(0).astype(bool)
    assert tok.decode(np.array(ids)[mask].tolist()) == answer + EOS_TOKEN  # the answer and the EOS after it
    rid = shard.tokens(1).tolist()
    assert [tok.decode(rid[b : b + 1]) for b in shard.docs[1]["bounds"]] == ["<|file_sep|>", "<|file_sep|>"]
    assert shard.mask(1).all() and shard.docs[1]["spans"] is False
    info = json.loads((tmp_path / "00000.json").read_text())
    assert info["with_loss_spans"] == 1 and info["dtype"] == "int32"


def test_boundary_regex_when_no_offsets(tmp_path, tok_file):
    text = "<|repo_name|>o/r\n<|file_sep|>a.py\nx = 1\n<|file_sep|>b.py\ny = 2\n"
    shard = _run(
        tmp_path, [Document(text=text, id="r", metadata={"source": "repo"})], tok_file, {"repo": r"^<\|file_sep\|>"}
    )
    assert len(shard.docs[0]["bounds"]) == 2


def test_spans_to_mask_rejects_bad_spans(tok_file):
    tok = load_tokenizer(tok_file)._tokenizer
    enc = tok.encode("abc def")
    with pytest.raises(ValueError, match="bad loss span"):
        spans_to_mask(enc, [[3, 2]], 7)
    with pytest.raises(ValueError, match="bad loss span"):
        spans_to_mask(enc, ["x"], 7)
    assert spans_to_mask(enc, [[0, 7]], 7).all()
    assert not spans_to_mask(enc, [], 7).any()
