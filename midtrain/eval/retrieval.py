"""Long-context retrieval in code: plant a needle at a chosen depth of a packed repository, ask for it at the end.

The haystack is real code: consecutive lines of the packed-repository documents that `midtrain prep repos`
wrote (Qwen2.5-Coder layout, files after ``<|file_sep|>PATH``). Two tasks:

- ``function``: a function ``def NAME():\\n    return VALUE`` sits in the code; the prompt ends with
  ``assert NAME() == `` and the model must produce VALUE.
- ``file_constant``: a file ``<|file_sep|>pkg/NAME.py`` holding ``CONST = VALUE`` sits in the repository; the
  prompt ends with a new file importing CONST and ``assert CONST == ``.

Each sample is exactly ``length`` tokens (haystack cut to fit), the needle placed at the line boundary
nearest to ``depth`` of the haystack. One forward pass scores it: the answer's mean NLL per token, and
exact match = every answer token is the argmax (what greedy decoding would produce).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from midtrain.eval.config import RetrievalConfig
from midtrain.eval.scoring import Scorer
from midtrain.formats.documents import document_files, read_jsonl

log = logging.getLogger(__name__)

_WORDS = (
    "alpha",
    "amber",
    "beacon",
    "cobalt",
    "delta",
    "ember",
    "falcon",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lumen",
    "maple",
    "nebula",
    "onyx",
    "quartz",
    "raven",
    "saffron",
    "tundra",
    "umber",
    "vertex",
    "willow",
    "zephyr",
)


@dataclass
class Sample:
    task: str
    length: int
    depth: float  # requested
    actual_depth: float  # where the needle landed (fraction of the haystack before it)
    ids: list[int]  # exactly `length` tokens, ending with the answer
    answer_len: int


def read_documents(docs_dir: str | Path, max_chars: int) -> list[str]:
    """Texts of the JSONL(.gz) documents under DIR (or DIR/documents), in file order, up to ~max_chars."""
    root = Path(docs_dir)
    if (root / "documents").is_dir():
        root = root / "documents"
    files = document_files(root)
    if not files:
        raise FileNotFoundError(f"retrieval.repos: no .jsonl(.gz) documents under {docs_dir}")
    texts, total = [], 0
    for f in files:
        for i, row in read_jsonl(f):
            text = row.get("text")
            if not isinstance(text, str):
                log.warning("retrieval: %s:%d is not a document, skipped", f, i)
                continue
            texts.append(text)
            total += len(text)
            if total >= max_chars:
                return texts
    return texts


class Haystack:
    """Tokenized code lines to cut haystacks from (each line keeps its newline)."""

    def __init__(self, texts: list[str], tokenizer: Any) -> None:
        lines = [ln for t in texts for ln in t.splitlines(keepends=True) if ln.strip()]
        if not lines:
            raise ValueError("retrieval: the repository documents hold no code lines")
        self.lines = [ids for ids in tokenizer(lines, add_special_tokens=False)["input_ids"] if ids]
        self.total = sum(len(x) for x in self.lines)

    def take(self, rng: random.Random, budget: int) -> list[list[int]]:
        """Consecutive lines (wrapping around) from a random start, cut to exactly ``budget`` tokens."""
        out, n = [], 0
        i = rng.randrange(len(self.lines))
        while n < budget:
            ids = self.lines[i % len(self.lines)]
            ids = ids[: budget - n]
            out.append(ids)
            n += len(ids)
            i += 1
        return out


def _needle(task: str, rng: random.Random) -> tuple[str, str, str]:
    """(needle text, query text, answer text)."""
    a, b = rng.sample(_WORDS, 2)
    value = str(rng.randrange(100_000, 1_000_000))
    if task == "function":
        name = f"get_{a}_{b}_id"
        return f"\n\ndef {name}():\n    return {value}\n\n", f"\n\nassert {name}() == ", value
    const = f"{a.upper()}_{b.upper()}_TOKEN"
    module = f"{a}_{b}_settings"
    return (
        f"<|file_sep|>config/{module}.py\n{const} = {value}\n",
        f"<|file_sep|>tests/test_{module}.py\nfrom config.{module} import {const}\n\n\ndef test_value():\n"
        f"    assert {const} == ",
        value,
    )


def build_samples(
    cfg: RetrievalConfig, tokenizer: Any, haystack: Haystack, max_positions: int | None = None
) -> tuple[list[Sample], list[str]]:
    """Every (task, length, depth, sample) cell; returns the samples and why any cell was skipped."""
    rng = random.Random(cfg.seed)
    samples, skipped = [], []
    enc = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    for task in cfg.tasks:
        for length in cfg.lengths:
            if max_positions and length > max_positions:
                skipped.append(f"length {length} > the model's {max_positions} positions")
                continue
            for depth in cfg.depths:
                for _ in range(cfg.samples):
                    needle, query, answer = (enc(x) for x in _needle(task, rng))
                    budget = length - len(needle) - len(query) - len(answer)
                    if budget < 16:
                        skipped.append(f"{task} length {length}: too short for the needle and question")
                        break
                    lines = haystack.take(rng, budget)
                    # needle goes at the line boundary nearest to depth * budget
                    cum, bounds = 0, [0]
                    for ln in lines:
                        cum += len(ln)
                        bounds.append(cum)
                    k = min(range(len(bounds)), key=lambda j: abs(bounds[j] - depth * budget))
                    hay = [t for ln in lines for t in ln]
                    ids = hay[: bounds[k]] + needle + hay[bounds[k] :] + query + answer
                    assert len(ids) == length, (len(ids), length)
                    samples.append(Sample(task, length, depth, bounds[k] / budget, ids, len(answer)))
    return samples, sorted(set(skipped))


@torch.no_grad()
def score_sample(scorer: Scorer, s: Sample) -> tuple[bool, float]:
    """(exact match of the answer under greedy decoding, mean answer NLL per token)."""
    ids = torch.tensor(s.ids, dtype=torch.long)
    L = ids.shape[0]
    first = L - s.answer_len  # index of the first answer token; predicted at position first-1
    pred_logits = scorer.logits(
        ids, torch.arange(L), torch.tensor([0, L], dtype=torch.int32), positions=torch.arange(first - 1, L - 1)
    )
    target = ids[first:]
    nll = torch.nn.functional.cross_entropy(pred_logits, target, reduction="mean").item()
    exact = bool((pred_logits.argmax(-1) == target).all())
    return exact, nll


def retrieval_probe(scorer: Scorer, cfg: RetrievalConfig, tokenizer: Any) -> dict[str, Any]:
    """Run every cell; returns per-cell accuracy and answer NLL plus their means (for the report)."""
    cfg.validate()
    if cfg.repos is None:
        raise ValueError("retrieval.repos: no repository documents given")
    need_chars = 8 * max(cfg.lengths) * 4  # ~4 chars/token; enough material for varied haystacks
    haystack = Haystack(read_documents(cfg.repos, need_chars), tokenizer)
    samples, skipped = build_samples(cfg, tokenizer, haystack, scorer.max_positions)
    for why in skipped:
        log.warning("retrieval: skipped %s", why)
    cells: dict[tuple[str, int, float], list[tuple[bool, float, float]]] = {}
    for s in tqdm(samples, desc="retrieval probe", leave=False):
        exact, nll = score_sample(scorer, s)
        cells.setdefault((s.task, s.length, s.depth), []).append((exact, nll, s.actual_depth))
    rows: list[dict[str, Any]] = [
        {
            "task": t,
            "length": n,
            "depth": d,
            "n": len(v),
            "accuracy": sum(x[0] for x in v) / len(v),
            "answer_nll": sum(x[1] for x in v) / len(v),
            "actual_depth": sum(x[2] for x in v) / len(v),
        }
        for (t, n, d), v in cells.items()
    ]
    mean = lambda key: sum(r[key] for r in rows) / len(rows) if rows else None  # noqa: E731
    return {
        "tasks": list(cfg.tasks),
        "lengths": [n for n in cfg.lengths if any(r["length"] == n for r in rows)],
        "depths": list(cfg.depths),
        "samples_per_cell": cfg.samples,
        "haystack_tokens": haystack.total,
        "cells": rows,
        "accuracy": mean("accuracy"),
        "answer_nll": mean("answer_nll"),
        "skipped": skipped,
    }
