"""Teacher-forced accuracy on held-out turns' command tokens, on the vendored real trajectories with a real
tokenizer: a scorer that reads the next token gets every command token right, one that repeats the current
token gets exactly the share of command tokens equal to the one before them."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from midtrain.eval.command_accuracy import command_accuracy, command_spans
from midtrain.eval.scoring import Scorer
from midtrain.formats.tokenizer import load_tokenizer

TRACE = Path(__file__).resolve().parents[1] / "data_prep" / "samples" / "real_traces" / "sympy__sympy-16886.traj.json"


class Copy(Scorer):
    """Top prediction at position p: the token at p + SHIFT of the window it is given (1: the true next one)."""

    vocab_size = 160_000

    def __init__(self, shift: int) -> None:
        self.shift = shift

    def logits(self, tokens, position_ids, cu_seqlens, positions=None):
        rows = torch.arange(len(tokens)) if positions is None else positions
        out = torch.zeros(len(rows), self.vocab_size)
        out[torch.arange(len(rows)), tokens[(rows + self.shift).clamp(max=len(tokens) - 1)]] = 1.0
        return out


def _doc() -> dict:
    """The trajectory as the probe's held-out document: its turns joined, the assistant ones as loss spans."""
    text, spans = "", []
    for m in json.loads(TRACE.read_text())["messages"]:
        head = f"<|im_start|>{m['role']}\n"
        if m["role"] == "assistant":
            spans.append([len(text) + len(head), len(text) + len(head) + len(m["content"])])
        text += head + m["content"] + "<|im_end|>\n"
    return {"id": "t", "text": text, "metadata": {"loss_spans": spans}}


def test_command_spans_are_the_bash_blocks_of_assistant_turns():
    text = "x\n```bash\nls -la\n```\ny ```bash\na\n```\n```bash\nb\n```"
    spans, turns, ok = command_spans(text, [[0, 20], [21, len(text)]])
    assert [text[a:b] for a, b in spans] == ["ls -la"] and (turns, ok) == (2, 1)  # the second has two blocks


def test_teacher_forced_command_accuracy_counts_each_command_token():
    tok = load_tokenizer(None)
    doc = _doc()
    right = command_accuracy(Copy(1), tok, [doc], context=512)
    assert right["turns"] >= 10 and right["token_accuracy"] == 1.0 and right["command_match"] == 1.0
    assert right["parseable"] == 1.0 and right["assistant_turns"] == len(doc["metadata"]["loss_spans"])
    same = command_accuracy(Copy(0), tok, [doc], context=512, max_turns=3)
    ids = tok(doc["text"], return_offsets_mapping=True, add_special_tokens=False)
    cmds, _, _ = command_spans(doc["text"], doc["metadata"]["loss_spans"])
    repeats = total = 0
    for a, b in cmds[:3]:
        inside = [t for t, (s, e) in enumerate(ids["offset_mapping"]) if s >= a and e <= b and e > s]
        total += len(inside)
        repeats += sum(ids["input_ids"][t] == ids["input_ids"][t - 1] for t in inside)
    assert same["turns"] == 3 and same["tokens"] == total
    assert same["token_accuracy"] == repeats / total < 0.5


def test_the_agent_legs_parseable_action_rate_reads_the_servers_log(tmp_path):
    from midtrain.eval.swebench_results import action_rate

    log = tmp_path / "server.jsonl"
    rows = [
        {"completion_tokens": 40, "bash_blocks": 1, "tool_calls": 0},
        {"completion_tokens": 64, "bash_blocks": 0, "tool_calls": 0},  # prose, cut at the limit
        {"completion_tokens": 50, "bash_blocks": 2, "tool_calls": 1},  # two blocks: the agent refuses it
        {"event": "start"},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert action_rate(log, "text") == {"replies": 3, "parseable": 1, "rate": 1 / 3, "format": "text"}
    assert action_rate(log, "tool_calls")["parseable"] == 1
    assert action_rate(tmp_path / "none.jsonl", "text")["rate"] is None
