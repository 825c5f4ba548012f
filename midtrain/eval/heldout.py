"""Held-out loss per source: the mean next-token NLL on a split of packed shards, by the token's source.

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

log = logging.getLogger(__name__)


def heldout_loss(
    scorer: Scorer, shards: str | Path, split: str = "valid", max_sequences: int | None = None
) -> dict[str, Any]:
    """{"per_source": {name: {"loss", "tokens"}}, "all": {"loss", "tokens"}, "sequences", "split", "shards"}."""
    from midtrain.formats.shard_reader import PackedDataset

    ds = PackedDataset(shards, split)
    names = list(ds.manifest.get("sources") or [])
    if scorer.max_positions and ds.seq_length > scorer.max_positions:
        raise ValueError(f"{shards}: seq_length {ds.seq_length} exceeds the model's {scorer.max_positions} positions")
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    n_seq = 0
    total = len(ds) if max_sequences is None else min(len(ds), max_sequences)
    for _, s in tqdm(iter_samples(ds, max_sequences), total=total, desc=f"held-out loss ({split})", leave=False):
        nll = scorer.token_nll(s["tokens"], s["labels"], s["position_ids"], s["cu_seqlens"])
        mask = s["loss_mask"] > 0
        src = s["source_ids"]
        for k in torch.unique(src[mask]).tolist():
            sel = mask & (src == k)
            sums[k] = sums.get(k, 0.0) + float(nll[sel].double().sum())
            counts[k] = counts.get(k, 0) + int(sel.sum())
        n_seq += 1
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
        "sequences": n_seq,
        "split": split,
        "shards": str(shards),
    }
