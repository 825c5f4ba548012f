"""SFT probe data selection: the fixed subset and held-out split, span checks (the masks end to end:
tests/test_sft_protocol.py::test_loss_only_on_assistant_tokens)."""

from __future__ import annotations

from midtrain.sft.config import SFTConfig
from midtrain.sft.data import check_spans, render, select_and_split


def _cfg(**kw) -> SFTConfig:
    cfg = SFTConfig(traces=["set"], valid_fraction=0.25, **kw)
    return cfg.validate()


def _docs(n: int, attempts: int = 1) -> list[dict]:
    return [
        {"id": f"trace:inst-{i}:try{a}.traj", "text": "x", "metadata": {"repo": f"o/r{i % 3}"}, "_set": "set"}
        for i in range(n)
        for a in range(attempts)
    ]


def test_split_is_by_instance_and_no_seed_or_order_moves_it():
    from midtrain.formats.trace_split import decide_split, instance_heldout

    docs = _docs(20, attempts=2)
    split = {"set": decide_split(docs, 0.25)}
    assert split["set"]["by"] == "instance" and split["set"]["groups"] == 20
    held_instances = {f"inst-{i}" for i in range(20) if instance_heldout(f"inst-{i}", 0.25)}
    assert split["set"]["heldout_groups"] == sorted(held_instances) and held_instances  # the hash rule, recorded
    cfg = _cfg()
    a = select_and_split(docs, cfg, split)
    b = select_and_split(list(reversed(docs)), cfg, split)
    assert [d["id"] for d in a[1]] == [d["id"] for d in b[1]] and len(a[1]) == 2 * len(held_instances)
    inst = lambda ds: {d["id"].split(":")[1] for d in ds}  # noqa: E731
    assert not inst(a[0]) & inst(a[1]) and inst(a[1]) == held_instances  # no held-out task has an attempt in training
    # the seed changes training only: the same held-out set
    c = select_and_split(docs, cfg.apply_overrides(["train.data.seed=99"]), split)
    assert [d["id"] for d in c[1]] == [d["id"] for d in a[1]]
    capped = select_and_split(docs, cfg.apply_overrides(["max_traces=4"]), split)
    assert len(capped[0]) == 4 and len(capped[1]) == len(a[1])  # the cap is on training traces
    # a set of other size decides the same instances: membership is the instance's, not the set's
    assert set(decide_split(docs[:10], 0.25)["heldout_groups"]) == held_instances & {f"inst-{i}" for i in range(5)}


def test_a_larger_fraction_only_adds_instances():
    from midtrain.formats.trace_split import decide_split

    docs = _docs(200)
    small, large = (set(decide_split(docs, f)["heldout_groups"]) for f in (0.05, 0.2))
    assert small < large and 0.02 < len(small) / 200 < 0.1 and 0.12 < len(large) / 200 < 0.3


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
    reused = {
        "id": "c",
        "text": "<|im_start|>assistant\nhi<|im_end|>",
        "metadata": {"source": "trace", "render_format": "chat_template", "loss_spans": [[22, 34]]},
    }
    assert render(reused, None) == (reused["text"], [[22, 34]])
