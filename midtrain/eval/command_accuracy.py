"""Teacher-forced accuracy on the commands of held-out assistant turns: a signal a 135M model registers where a
resolve rate reads 0.

Each held-out trajectory's assistant turns (its ``loss_spans``) hold one command each, in mini-swe-agent's text
format (a ```bash block; ``COMMAND``). For the first ``max_turns`` commands of a trajectory the scorer reads the
trajectory up to the command's end (at most ``context`` tokens) and predicts every command token from the ones
before it: ``token_accuracy`` is the share of command tokens that are the model's top prediction, and
``command_match`` the share of commands whose every token is. ``parseable`` is the share of assistant turns that
hold exactly one command block (what the agent's parser needs; the teacher's own turns, so ~1).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from midtrain.eval.scoring import Scorer
from midtrain.eval.serve import COMMAND


def command_spans(text: str, spans: list[list[int]]) -> tuple[list[tuple[int, int]], int, int]:
    """(character spans of the commands, assistant turns, turns with exactly one command block)."""
    out: list[tuple[int, int]] = []
    parseable = 0
    for a, b in spans:
        found = list(COMMAND.finditer(text, a, b))
        if len(found) == 1:
            parseable += 1
            out.append((found[0].start(1), found[0].end(1)))
    return out, len(spans), parseable


@torch.no_grad()
def command_accuracy(
    scorer: Scorer, tokenizer: Any, docs: Iterable[dict], context: int = 512, max_turns: int | None = None
) -> dict[str, Any]:
    """Teacher-forced command-token accuracy over DOCS ({text, metadata.loss_spans}); see the module docstring."""
    tokens = correct = turns = exact = assistant = parseable = 0
    for doc in docs:
        text = doc.get("text") or ""
        spans = (doc.get("metadata") or {}).get("loss_spans") or [[0, len(text)]]
        cmds, n_turns, n_ok = command_spans(text, spans)
        assistant, parseable = assistant + n_turns, parseable + n_ok
        if not cmds:
            continue
        enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        ids, offs = list(enc["input_ids"]), list(enc["offset_mapping"])
        for a, b in cmds[:max_turns]:
            inside = [t for t, (s, e) in enumerate(offs) if s >= a and e <= b and e > s]
            if not inside:
                continue
            last = inside[-1]
            start = max(0, last + 1 - context)
            targets = [t for t in inside if t > start]  # a token needs one before it in the window
            if not targets:
                continue
            window = torch.tensor(ids[start : last + 1], dtype=torch.long)
            pos = torch.arange(len(window))
            cu = torch.tensor([0, len(window)], dtype=torch.int32)
            want = torch.tensor([ids[t] for t in targets])
            logits = scorer.logits(window, pos, cu, positions=torch.tensor([t - 1 - start for t in targets]))
            hit = logits.argmax(-1).cpu() == want
            tokens, correct = tokens + len(targets), correct + int(hit.sum())
            turns, exact = turns + 1, exact + int(bool(hit.all()))
    return {
        "turns": turns,
        "tokens": tokens,
        "token_accuracy": correct / tokens if tokens else None,
        "command_match": exact / turns if turns else None,
        "assistant_turns": assistant,
        "parseable": parseable / assistant if assistant else None,
        "context": context,
        "max_turns": max_turns,
    }
