"""SFT probe data selection: the fixed subset and held-out split, span checks (the masks end to end:
tests/test_sft_protocol.py::test_loss_only_on_assistant_tokens)."""

from __future__ import annotations

from midtrain.sft.config import SFTConfig
from midtrain.sft.data import check_spans, render, select_and_split


def _cfg(**kw) -> SFTConfig:
    cfg = SFTConfig(traces=["unused"], valid_fraction=0.25, **kw)
    return cfg.validate()


def test_split_is_deterministic_and_seeded():
    docs = [{"id": f"d{i}", "text": "x", "metadata": {}} for i in range(20)]
    cfg = _cfg()
    a = select_and_split(docs, cfg)
    b = select_and_split(list(reversed(docs)), cfg)
    assert [d["id"] for d in a[1]] == [d["id"] for d in b[1]] and len(a[1]) == 5
    assert not {d["id"] for d in a[0]} & {d["id"] for d in a[1]}
    c = select_and_split(docs, cfg.apply_overrides(["train.data.seed=99"]))
    assert {d["id"] for d in c[1]} != {d["id"] for d in a[1]}
    capped = select_and_split(docs, cfg.apply_overrides(["max_traces=4"]))
    assert len(capped[0]) + len(capped[1]) == 4
    # two traces: one held out; one trace: none (never an empty training set)
    assert [len(x) for x in select_and_split(docs[:2], cfg)] == [1, 1]
    assert [len(x) for x in select_and_split(docs[:1], cfg)] == [1, 0]


def test_span_checks():
    assert check_spans("abcdef", [[0, 2], [3, 5]]) is None
    assert check_spans("abc", []) == "no_assistant_turns"
    assert check_spans("abc", [[2, 1]]) == "bad_loss_spans"
    assert check_spans("abcdef", [[0, 4], [3, 5]]) == "bad_loss_spans"
    assert check_spans("abc", [[0, 9]]) == "bad_loss_spans"


def test_render_reasons_without_a_tokenizer_call():
    assert render({"id": "r", "text": "x", "metadata": {"source": "repo"}}, None) == "not_a_trace"
    plain = {"id": "p", "text": "x", "metadata": {"source": "trace", "render_format": "plain"}}
    assert render(plain, None) == "plain_render_without_messages"
    reused = {"id": "c", "text": "<|im_start|>assistant\nhi<|im_end|>",
              "metadata": {"source": "trace", "render_format": "chat_template", "loss_spans": [[22, 34]]}}
    assert render(reused, None) == (reused["text"], [[22, 34]])
