"""Mixture: how many training tokens each source contributes, as token targets with a repetition cap.

Targets are either absolute (``tokens``: source -> tokens) or weights over a total (``weights`` and
``total_tokens``; without a total, the largest total that no source's repetition cap prevents). With neither,
the mixture is natural: every source once. A source's *rate* is its target over its available training
tokens; each pack task then takes each of its documents ``floor(rate)`` times, plus once more for the
documents first in seeded-hash order until ``frac(rate)`` of its tokens of that source are covered: every
task selects its share independently, deterministically, and within one document of its share.
Achieved tokens are measured after packing and reported next to the targets.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass, field

from midtrain.config import Config, require
from midtrain.formats.source_specs import doc_traits

log = logging.getLogger(__name__)


@dataclass
class MixtureConfig(Config):
    """Per-source token targets for the training split (validation documents are never repeated)."""

    name: str = "natural"
    weights: dict[str, float] = field(default_factory=dict)  # source -> relative weight (0 = leave out)
    total_tokens: int | None = None  # training tokens the weights share; None = as many as max_repeat allows
    tokens: dict[str, int] = field(default_factory=dict)  # source -> absolute target (wins over weights)
    max_repeat: float = 4.0  # no source is taken more than this many times (epochs)

    def check(self) -> None:
        require(self.max_repeat > 0, "max_repeat", "must be positive (1 = never repeat)")
        require(all(w >= 0 for w in self.weights.values()), "weights", "must be >= 0")
        require(not self.weights or sum(self.weights.values()) > 0, "weights", "must not all be 0")
        require(all(t >= 0 for t in self.tokens.values()), "tokens", "must be >= 0")
        require(self.total_tokens is None or self.total_tokens > 0, "total_tokens", "must be positive")
        require(self.total_tokens is None or bool(self.weights), "total_tokens", "needs weights to share it")
        overlap = set(self.weights) & set(self.tokens)
        require(not overlap, "tokens", f"sources {sorted(overlap)} have both an absolute target and a weight")


@dataclass
class SourcePlan:
    available: int  # training tokens on offer (after the validation carve-out)
    target: int
    rate: float  # copies per document, expected
    capped: bool  # the target needed more repeats than max_repeat


def plan_mixture(cfg: MixtureConfig, available: dict[str, int]) -> dict[str, SourcePlan]:
    """Per-source targets and sampling rates for the available training tokens of each source."""
    plans: dict[str, SourcePlan] = {}
    targets: dict[str, float] = {}
    if not cfg.weights and not cfg.tokens:
        targets = {s: float(n) for s, n in available.items()}
    else:
        for s in available:
            if s not in cfg.weights and s not in cfg.tokens:
                log.warning("mixture %s: source %r has no weight or target; it is left out", cfg.name, s)
        targets.update({s: float(t) for s, t in cfg.tokens.items()})
        wsum = sum(cfg.weights.values())
        if cfg.weights:
            total: float | None = cfg.total_tokens
            if total is None:  # the largest total no weighted source's cap prevents
                # a weighted source missing from the inputs is warned about below; it must not make the
                # total (and so every target) zero
                present = [(s, w) for s, w in cfg.weights.items() if w > 0 and available.get(s, 0) > 0]
                if not present:
                    raise ValueError(
                        f"mixture {cfg.name}: none of its weighted sources "
                        f"({', '.join(sorted(cfg.weights))}) has documents in the inputs"
                    )
                total = min((available[s] * cfg.max_repeat) / (w / wsum) for s, w in present)
            targets.update({s: total * w / wsum for s, w in cfg.weights.items()})
    for s, n in available.items():
        target = targets.get(s, 0.0)
        rate = target / n if n else 0.0
        capped = rate > cfg.max_repeat + 1e-9
        if capped:
            log.warning(
                "mixture %s: source %r needs %.2f repeats for %d tokens (max_repeat=%g); capped",
                cfg.name,
                s,
                rate,
                int(target),
                cfg.max_repeat,
            )
            rate = cfg.max_repeat
        plans[s] = SourcePlan(available=n, target=int(round(target)), rate=rate, capped=capped)
    for s in targets:
        if s not in available and targets[s] > 0:
            log.warning("mixture %s: source %r has a target but no documents in the inputs", cfg.name, s)
            plans[s] = SourcePlan(available=0, target=int(round(targets[s])), rate=0.0, capped=True)
    return plans


def unit_hash(seed: int, salt: str, key: str) -> float:
    """A deterministic uniform [0, 1) draw for ``key`` (a document id) under ``seed`` and ``salt``."""
    h = hashlib.blake2b(f"{seed}:{salt}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64


def valid_draw(doc_id: str) -> float:
    """The validation draw of a document: seed-independent, so the held-out set stays put across seeds."""
    return unit_hash(0, "valid", doc_id)


def select_copies(rate: float, docs: list[tuple[str, int]], seed: int) -> list[int]:
    """Copies of each (doc id, tokens) of one source at ``rate``: the whole part for every document, one more
    for documents in seeded-hash order while that brings the total closer to ``rate`` x tokens."""
    whole = math.floor(rate)
    out = [whole] * len(docs)
    goal = (rate - whole) * sum(n for _, n in docs)
    taken = 0
    for i in sorted(range(len(docs)), key=lambda i: unit_hash(seed, "mix", docs[i][0])):
        n = docs[i][1]
        if taken + n / 2 > goal:
            break
        out[i] += 1
        taken += n
    return out


def heldout_rules(inputs: list[str], record: bool = True) -> list[dict | None]:
    """Per pack input, a trace set's recorded split (midtrain.formats.trace_split: its fraction, its held-out
    instances; ``fraction`` None = a set the SFT probe split already, nothing in it held out), decided and
    recorded in INPUT/heldout.json now when the set has none and ``record`` (a pack without the run's split file);
    None for other inputs and, not recording, for a set without one."""
    # lazy: loads datatrove only when this runs
    from midtrain.formats.trace_split import ensure_split, iter_documents, read_split

    out: list[dict | None] = []
    for i in inputs:
        first = next(iter_documents(i, first_only=True), None)
        traits = doc_traits(((first or {}).get("metadata") or {}).get("source"))
        if traits is None or not traits.recorded_split:
            out.append(None)
            continue
        split = ensure_split(i, None, decided_by="midtrain pack") if record else read_split(i)
        if split is None:
            out.append(None)
            continue
        out.append(
            {
                "by": "presplit" if split["fraction"] is None else split["by"],
                "fraction": split["fraction"],
                "heldout_groups": split["heldout_groups"],
            }
        )
    return out


def heldout_fraction(configured: float, rules: list[dict | None]) -> float:
    """The fraction a pack holds out at: its own or a trace input's recorded one, the larger (the held-out sets
    are nested, so the larger holds out every instance the smaller does)."""
    return max([configured] + [float(r["fraction"]) for r in rules if r and r.get("fraction")])
