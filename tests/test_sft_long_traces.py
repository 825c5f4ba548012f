"""An over-long trajectory is split at turn boundaries, and every continuation piece starts with the
trajectory's head (system prompt, tools, task) again, without loss on it."""

from __future__ import annotations

import json

import pytest
from sft_helpers import probe_cfg, sample_trace_docs, write_documents

pytestmark = pytest.mark.slow

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


def _long_trajectory() -> dict:
    msgs: list[dict] = [
        {"role": "system", "content": "You are a careful software engineering agent working in /repo."},
        {"role": "user", "content": "Issue: calc.add(1, '2') raises TypeError; make it coerce numeric strings."},
    ]
    for i in range(48):
        msgs.append(
            {
                "role": "assistant",
                "content": f"Step {i}: inspect the next part of calc.py.",
                "tool_calls": [
                    {"type": "function", "function": {"name": "bash", "arguments": {"cmd": f"sed -n {i}p calc.py"}}}
                ],
            }
        )
        msgs.append(
            {"role": "tool", "content": "\n".join(f"line {i}.{k}: def add(a, b): return a + b" for k in range(4))}
        )
    doc_id = "trace:acme__minicalc-99:long.traj"
    return {
        "text": "(plain rendering not used)",
        "id": doc_id,
        "metadata": {
            "source": "trace",
            "id": doc_id,
            "render_format": "plain",
            "instance_id": "acme__minicalc-99",
            "repo": "acme/minicalc",
            "messages": msgs,
            "tools": TOOLS,
            "loss_spans": [[0, 1]],
        },
    }


def test_long_trajectory_pieces_start_at_turns_and_repeat_the_head(tmp_path):
    from midtrain.formats.shard_reader import PackedDataset
    from midtrain.formats.tokenizer import load_tokenizer
    from midtrain.sft.data import prepare_data
    from midtrain.sources.traces import render_chat_template

    tok = load_tokenizer()
    long = _long_trajectory()
    rendered = render_chat_template(long["metadata"]["messages"], tok, TOOLS)
    assert rendered is not None
    text, _ = rendered
    head = text[: text.index("<|im_start|>assistant\n")]
    assert "bash" in head and "Issue:" in head and len(tok.encode(text)) > 2 * 2048
    head_ids = tok.encode(head, add_special_tokens=False)
    traces = write_documents(tmp_path / "traces", sample_trace_docs() + [long])
    # 2K sequences: a head of ~165 tokens is within the 1/8 of a sequence a repeated head may take
    stamp = prepare_data(probe_cfg(traces, "train.data.seq_length=2048"), tmp_path / "data")
    pieces = []
    for shards in (stamp["train_shards"], stamp["valid_shards"]):
        ds = PackedDataset(shards, "train")
        docs = {str(s.prefix): (s.prefix.parent / f"{s.prefix.name}.docs.txt").read_text().split() for s in ds._shards}
        for i in range(len(ds)):
            shard, _ = ds.locate(i)
            x, rows = ds[i], ds.pieces(i)
            offset = 0
            for row in rows:
                n = int(row["tokens"])
                if row["source"] >= 0 and docs[str(shard.prefix)][row["doc"]] == long["id"]:
                    pieces.append(
                        (
                            int(row["part"]),
                            int(row["parts"]),
                            x["tokens"][offset : offset + n].tolist(),
                            x["loss_mask"][offset : offset + n].tolist(),
                        )
                    )
                offset += n  # pad_multiple=1: no padding between pieces
    pieces.sort(key=lambda p: p[0])
    assert len(pieces) == pieces[0][1] >= 3 and [p[0] for p in pieces] == list(range(len(pieces)))
    for part, _, ids, mask in pieces[1:]:
        assert ids[: len(head_ids)] == head_ids  # the head again: system prompt, tools, task
        # no loss on the repeated head (the loss mask shifts by one: position p trains token p+1)
        assert not any(mask[: len(head_ids) - 1])
        rest = tok.decode(ids[len(head_ids) : len(head_ids) + 8])
        assert rest.startswith(("<|im_start|>assistant\n", "<|im_start|>user\n<tool_response>")), (part, rest)
    assert json.loads((tmp_path / "data" / "sft_data.json").read_text())["train_docs"] >= 1
