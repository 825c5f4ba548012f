"""The validation split kept out of training by content, not only by id.

A pack's validation documents (the proxy's held-out loss: a validation repository's files, a document drawn by
its id) are quoted under other ids: a commit's diff holds the file it changed, another version of a repository
holds the same code. A training document that shares a word 13-gram (SWE-bench's decontamination rule,
:class:`midtrain.curate.decontam.NgramIndex`) with a validation document whose every token is scored (code,
commits: no loss spans) is dropped, counted ``dropped_valid_ngram`` with the n-gram and the validation document
it matched (``PackConfig.valid_decontam_ngrams``; 0 turns it off).

Only wholly scored documents on both sides: a trajectory's scored text is its assistant turns, and those share the
agent's own phrasing (its submit command, its THOUGHT template) with every other trajectory, so a rule over them
would drop every training trace. Held-out trajectories are kept out by instance (the run's split), by content at
prep (``decontam.heldout``) and checked by the probe's scan (midtrain.curate.leak_scan).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from midtrain.curate.decontam import NgramIndex
from midtrain.pack.tokenize import TokenizedShard

REASON = "dropped_valid_ngram"
EXAMPLES = 20  # the first drops named in the stats (the count covers all)


class ValidOverlap:
    """The wholly scored validation documents' n-grams; ``hit`` checks a training document against them and
    ``drop`` counts one."""

    def __init__(self, n: int, decode: Callable[[np.ndarray], str]) -> None:
        self.index = NgramIndex(n)
        self.decode = decode
        self.counts: dict[str, Any] = {
            "reason": REASON,
            "ngram_size": n,
            "validation_documents": 0,
            "documents": 0,
            "tokens": 0,
            "documents_by_source": {},
            "tokens_by_source": {},
            "examples": [],
        }

    @staticmethod
    def whole(shard: TokenizedShard, d: int) -> bool:
        """Whether every token of document D is scored (no loss spans; a cache without the flag: its mask)."""
        spans = shard.docs[d].get("spans")
        return not spans if spans is not None else bool(np.asarray(shard.mask(d)).all())

    def add(self, shard: TokenizedShard, d: int) -> None:
        if self.whole(shard, d) and self.index.add(shard.docs[d]["id"], self.decode(shard.tokens(d))):
            self.counts["validation_documents"] += 1

    def hit(self, shard: TokenizedShard, d: int) -> tuple[str, str] | None:
        """(n-gram, validation document) a wholly trained document D shares, or None."""
        if not len(self.index) or not self.whole(shard, d):
            return None
        return self.index.first_hit(self.decode(shard.tokens(d)))

    def drop(self, meta: dict, hit: tuple[str, str]) -> None:
        c = self.counts
        c["documents"] += 1
        c["tokens"] += int(meta["tokens"])
        for key, n in (("documents_by_source", 1), ("tokens_by_source", int(meta["tokens"]))):
            c[key][meta["source"]] = c[key].get(meta["source"], 0) + n
        if len(c["examples"]) < EXAMPLES:
            c["examples"].append({"document": meta["id"], "validation_document": hit[1], "ngram": hit[0]})


def decoder(tokenizer: Any) -> Callable[[np.ndarray], str]:
    """Token ids -> text (special tokens, the appended end of document, left out)."""
    return lambda ids: tokenizer.decode(np.asarray(ids).tolist(), skip_special_tokens=True)
