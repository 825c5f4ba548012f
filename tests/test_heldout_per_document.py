"""Held-out loss per document: what the primary comparison's bootstrap resamples. Every scored position is
counted once, under the document it belongs to, pieces of one document summed whole."""

from __future__ import annotations

import math

import torch
from train_helpers import write_shards

from midtrain.eval.heldout import heldout_loss
from midtrain.eval.scoring import Scorer
from midtrain.formats.shard_reader import PackedDataset


class Uniform(Scorer):
    """The uniform model over V ids: every position's NLL is log V."""

    name, vocab_size = "uniform", 256

    def logits(self, tokens, position_ids, cu_seqlens, positions=None):
        return torch.zeros(len(tokens) if positions is None else len(positions), self.vocab_size)


def test_per_document_tokens_add_up_and_each_is_its_pieces_scored_positions(tmp_path):
    shards = write_shards(tmp_path / "s", sequences=6, seq_length=64, masks=True)
    held = heldout_loss(Uniform(), shards, "train")
    per = held["per_document"]
    assert sum(d["tokens"] for d in per.values()) == held["all"]["tokens"] > 0
    assert all(math.isclose(d["loss"], math.log(256), rel_tol=1e-6) for d in per.values())
    ds = PackedDataset(shards, "train")
    expected: dict[str, int] = {}
    for i in range(len(ds)):
        s, rows = ds[i], ds.pieces(i)
        cu = s["cu_seqlens"].tolist()
        for p, row in enumerate(rows):
            n = int((s["loss_mask"][cu[p] : cu[p + 1]] > 0).sum())
            if n:
                expected[f"doc-{int(row['doc'])}"] = expected.get(f"doc-{int(row['doc'])}", 0) + n
    assert {d: v["tokens"] for d, v in per.items()} == expected
