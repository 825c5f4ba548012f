"""SFT probe data: chat-template rendering, assistant-only loss through packing and the reader."""

from __future__ import annotations

import pytest

from midtrain.sft.config import SFTConfig
from midtrain.sft.data import check_spans, prepare_data, render, select_and_split
from tests.sft_helpers import sample_trace_docs, write_documents


def _cfg(tmp_path, **kw) -> SFTConfig:
    cfg = SFTConfig(traces=[str(tmp_path / "traces")], valid_fraction=0.25, **kw)
    cfg.train.data.seq_length = 1024
    return cfg.validate()


@pytest.fixture(scope="module")
def probe_data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sftdata")
    docs = sample_trace_docs()
    extra = [  # two documents the probe must not use, counted by reason
        {"text": "### User\nhi\n", "id": "trace:plain", "metadata": {"source": "trace", "render_format": "plain",
                                                                       "loss_spans": [[0, 3]]}},
        {"text": "def f(): pass\n", "id": "repo:x", "metadata": {"source": "repo"}},
    ]
    write_documents(tmp / "traces", docs + extra)
    cfg = _cfg(tmp)
    stamp = prepare_data(cfg, tmp / "data")
    return cfg, stamp, docs


def test_loss_only_on_assistant_tokens(probe_data):
    from midtrain.pack.reader import PackedDataset
    from midtrain.pack.tokenizer import load_tokenizer

    cfg, stamp, docs = probe_data
    tok = load_tokenizer()
    assert stamp["masks"] is True
    # What the probe should train on: the assistant turns of the chat-template rendering (content + <|im_end|>).
    expected, others = [], []
    for d in docs:
        text, spans = render(d, tok)
        expected += [text[a:b] for a, b in spans]
        last = 0
        for a, b in spans:
            others.append(text[last:a])
            last = b
        others.append(text[last:])
    assert all(e.endswith("<|im_end|>") for e in expected)
    runs = []
    for shards in (stamp["train_shards"], stamp["valid_shards"]):
        ds = PackedDataset(shards, "train")
        for i in range(len(ds)):
            s = ds[i]
            on = s["loss_mask"].bool().tolist()
            labels = s["labels"].tolist()
            run: list[int] = []
            for p, flag in enumerate(on):
                if flag:
                    run.append(labels[p])
                elif run:
                    runs.append(tok.decode(run))
                    run = []
            if run:
                runs.append(tok.decode(run))
    # Every trained token sequence is exactly one assistant turn, and every assistant turn is trained.
    assert sorted(runs) == sorted(expected)
    joined = "".join(runs)
    for role in ("<|im_start|>system", "<|im_start|>user", "<|im_start|>assistant", "<tool_response>"):
        assert role not in joined
    # system / user / tool text never carries loss
    assert any("<|im_start|>system" in o for o in others) and any("<tool_response>" in o for o in others)


def test_counts_drops_and_splits(probe_data):
    cfg, stamp, docs = probe_data
    assert stamp["dropped"] == {"plain_render_without_messages": 1, "not_a_trace": 1}
    assert stamp["train_docs"] + stamp["valid_docs"] == len(docs)
    assert stamp["valid_docs"] >= 1 and not set(stamp["train_ids"]) & set(stamp["valid_ids"])
    # reusing the data dir with the same settings is a no-op; other settings are refused
    assert prepare_data(cfg, stamp["train_shards"].rsplit("/", 1)[0]) == stamp
    other = cfg.apply_overrides(["valid_fraction=0.5"])
    with pytest.raises(ValueError, match="other settings"):
        prepare_data(other, stamp["train_shards"].rsplit("/", 1)[0])


def test_split_is_deterministic_and_seeded(tmp_path):
    docs = [{"id": f"d{i}", "text": "x", "metadata": {}} for i in range(20)]
    cfg = _cfg(tmp_path)
    a = select_and_split(docs, cfg)
    b = select_and_split(list(reversed(docs)), cfg)
    assert [d["id"] for d in a[1]] == [d["id"] for d in b[1]] and len(a[1]) == 5
    c = select_and_split(docs, cfg.apply_overrides(["train.data.seed=99"]))
    assert {d["id"] for d in c[1]} != {d["id"] for d in a[1]}
    capped = select_and_split(docs, cfg.apply_overrides(["max_traces=4"]))
    assert len(capped[0]) + len(capped[1]) == 4


def test_span_checks():
    assert check_spans("abcdef", [[0, 2], [3, 5]]) is None
    assert check_spans("abc", []) == "no_assistant_turns"
    assert check_spans("abc", [[2, 1]]) == "bad_loss_spans"
    assert check_spans("abcdef", [[0, 4], [3, 5]]) == "bad_loss_spans"
    assert check_spans("abc", [[0, 9]]) == "bad_loss_spans"
