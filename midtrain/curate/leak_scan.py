"""Held-out text in packed training shards, found by content: decode every training sequence and count the
held-out texts' word n-grams it contains (:class:`midtrain.curate.decontam.NgramIndex`, the decontamination
step's rule). An id check sees only document ids; a held-out trajectory quoted in a commit diff has another.

``overlap`` is the share of the held-out n-grams (after ``discard``-ing a template every text shares) found in
some training sequence; ``sequences_with_overlap`` how many training sequences hold one. The probe's self-check,
``midtrain inspect --heldout`` and the real-model report print both; above ``MAX_OVERLAP`` the check fails.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from midtrain.curate.decontam import NgramIndex, scored_text
from midtrain.formats.shard_reader import PackedDataset
from midtrain.formats.tokenizer import load_tokenizer

# The share of held-out n-grams training may hold: ordinary code shares a few 13-grams by chance (licence
# lines, `if __name__ == "__main__"` blocks); a trajectory or document in a training shard shows as 10-100%.
MAX_OVERLAP = 0.01


def heldout_index(heldout: Iterable[dict], template: Iterable[dict] = (), n: int = 13) -> NgramIndex:
    """The n-grams of the held-out documents' scored text, less those of TEMPLATE's documents (the training
    traces: a system prompt every trajectory repeats is no leak)."""
    index = NgramIndex(n)
    for doc in heldout:
        index.add(str(doc.get("id", "?")), scored_text(doc))
    for doc in template:
        index.discard(doc.get("text") or "")
    return index


def scan_shards(
    shard_dir: str | Path, index: NgramIndex, tokenizer: str | None, split: str = "train"
) -> dict[str, Any]:
    """How much of INDEX the SPLIT sequences of SHARD_DIR contain (decoded with TOKENIZER)."""
    tok = load_tokenizer(tokenizer, shared=True)
    ds = PackedDataset(shard_dir, split)
    found: set[int] = set()
    hit_sequences = 0
    by_key: dict[str, int] = {}
    for i in range(len(ds)):
        text = tok.decode(ds[i]["tokens"].tolist(), skip_special_tokens=False)
        hits = index.found(text)
        if hits:
            hit_sequences += 1
            found |= hits
            for h in hits:
                by_key[index.grams[h]] = by_key.get(index.grams[h], 0) + 1
    overlap = len(found) / len(index) if len(index) else 0.0
    return {
        "shards": str(shard_dir),
        "split": split,
        "sequences": len(ds),
        "sequences_with_overlap": hit_sequences,
        "heldout_ngrams": len(index),
        "heldout_ngrams_found": len(found),
        "overlap": overlap,
        "ngram_size": index.n,
        "by_heldout_document": dict(sorted(by_key.items())),
        "max_overlap": MAX_OVERLAP,
        "leak": overlap > MAX_OVERLAP,
    }


def describe(scan: dict[str, Any]) -> str:
    """One line: what the scan found."""
    leak = f" — LEAK (above {scan['max_overlap']:.0%})" if scan["leak"] else ""
    return (
        f"{scan['shards']} ({scan['split']}): {scan['heldout_ngrams_found']:,} of {scan['heldout_ngrams']:,} "
        f"held-out {scan['ngram_size']}-grams ({scan['overlap']:.2%}) in {scan['sequences_with_overlap']} of "
        f"{scan['sequences']} sequences{leak}"
    )
