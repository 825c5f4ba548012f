"""Held-out loss per source: the mean next-token NLL on a split of packed shards, by the token's source, and
per document (its id; a document split over sequences is summed whole): what a bootstrap over held-out documents
resamples (midtrain.eval.noise.hierarchical_bootstrap).

Counts exactly the positions the trainer would train on (the reader's ``loss_mask``: no padding, no
cross-document targets, only ``loss_spans`` when the shards carry masks), so the SFT probe's held-out loss
is over assistant tokens only and a midtraining run's is over every document token.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from midtrain.eval.scoring import Scorer, iter_samples
from midtrain.formats.shard_reader import PackedDataset

log = logging.getLogger(__name__)


def heldout_loss(
    scorer: Scorer, shards: str | Path, split: str = "valid", max_sequences: int | None = None
) -> dict[str, Any]:
    """{"per_source": {name: {"loss", "tokens"}}, "all": {"loss", "tokens"}, "sequences", "split", "shards"}."""

    ds = PackedDataset(shards, split)
    names = list(ds.manifest.get("sources") or [])
    if scorer.max_positions and ds.seq_length > scorer.max_positions:
        raise ValueError(f"{shards}: seq_length {ds.seq_length} exceeds the model's {scorer.max_positions} positions")
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    doc_sums: dict[str, float] = {}
    doc_counts: dict[str, int] = {}
    doc_ids: dict[str, list[str]] = {}  # shard prefix -> its documents' ids (the pieces' `doc` index)
    n_seq = 0
    total = len(ds) if max_sequences is None else min(len(ds), max_sequences)
    for i, s in tqdm(iter_samples(ds, max_sequences), total=total, desc=f"held-out loss ({split})", leave=False):
        mask = s["loss_mask"] > 0
        n_seq += 1
        if not mask.any():  # nothing scored here (shards packed before loss-free pieces were left out)
            continue
        nll = scorer.token_nll(s["tokens"], s["labels"], s["position_ids"], s["cu_seqlens"], mask)
        src = s["source_ids"]
        for k in torch.unique(src[mask]).tolist():
            sel = mask & (src == k)
            sums[k] = sums.get(k, 0.0) + float(nll[sel].double().sum())
            counts[k] = counts.get(k, 0) + int(sel.sum())
        shard, _ = ds.locate(i)
        ids = doc_ids.setdefault(str(shard.prefix), _doc_ids(shard.prefix))
        cu = s["cu_seqlens"].tolist()
        for p, row in enumerate(ds.pieces(i)):
            sel = mask[cu[p] : cu[p + 1]]
            n = int(sel.sum())
            if n and 0 <= int(row["doc"]) < len(ids):
                d = ids[int(row["doc"])]
                doc_sums[d] = doc_sums.get(d, 0.0) + float(nll[cu[p] : cu[p + 1]][sel].double().sum())
                doc_counts[d] = doc_counts.get(d, 0) + n
    if not counts:
        log.warning("held-out loss: no scored tokens in %s (%s, %d sequences)", shards, split, n_seq)
    per = {}
    for k in sorted(counts):
        name = names[k] if 0 <= k < len(names) else f"source_{k}"
        per[name] = {"loss": sums[k] / counts[k], "tokens": counts[k]}
    tot_tokens = sum(counts.values())
    all_loss = sum(sums.values()) / tot_tokens if tot_tokens else None
    return {
        "per_source": per,
        "all": {"loss": all_loss, "tokens": tot_tokens},
        "per_document": {d: {"loss": doc_sums[d] / doc_counts[d], "tokens": doc_counts[d]} for d in sorted(doc_counts)},
        "sequences": n_seq,
        "split": split,
        "shards": str(shards),
    }


def _doc_ids(prefix: Path) -> list[str]:
    """The ids of a shard's documents, in the order its pieces' ``doc`` index them ([] without the list)."""
    f = Path(f"{prefix}.docs.txt")
    return f.read_text().splitlines() if f.is_file() else []
