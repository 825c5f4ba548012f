"""Shard format + trainer-side reader: exact tensors for hand-built sequences, masks, and bit-exact resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from midtrain.formats.shard_reader import PackedDataset, PackedLoader
from midtrain.formats.shards import PackedShardWriter, Piece, shard_prefix

PAD = 0
S = 16


def _write(tmp_path, sequences_by_split, *, masks=False, pad_multiple=1, dtype=np.int32):
    manifest = {
        "seq_length": S,
        "pad_id": PAD,
        "pad_multiple": pad_multiple,
        "masks": masks,
        "sources": {"repo": {}, "trace": {}},
        "splits": {},
    }
    for split, sequences in sequences_by_split.items():
        w = PackedShardWriter(
            shard_prefix(tmp_path, split, 0),
            seq_length=S,
            pad_id=PAD,
            dtype=dtype,
            pad_multiple=pad_multiple,
            with_masks=masks,
            sources=["repo", "trace"],
        )
        for pieces in sequences:
            w.add(pieces)
        stats = w.finalize()
        manifest["splits"][split] = {"shards": [f"{split}/00000"], "sequences": stats["sequences"]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return stats


def test_sample_tensors(tmp_path):
    a = Piece(np.arange(10, 16), None, 0, "doc-a")  # 6 tokens
    b = Piece(np.arange(20, 27), None, 1, "doc-b", part=1, parts=2)  # 7 tokens
    stats = _write(tmp_path, {"train": [[a, b]]})
    assert stats["tokens"] == 13 and stats["padding_tokens"] == 3 and stats["fill"] == 13 / 16
    ds = PackedDataset(tmp_path)
    assert len(ds) == 1
    x = ds[0]
    assert x["tokens"].dtype == torch.int64 and x["tokens"].shape == (S,)
    assert x["tokens"].tolist() == list(range(10, 16)) + list(range(20, 27)) + [PAD] * 3
    assert x["labels"].tolist() == x["tokens"].tolist()[1:] + [PAD]
    assert x["cu_seqlens"].dtype == torch.int32 and x["cu_seqlens"].tolist() == [0, 6, 13, 16]
    assert x["position_ids"].tolist() == list(range(6)) + list(range(7)) + list(range(3))
    assert x["source_ids"].tolist() == [0] * 6 + [1] * 7 + [-1] * 3
    expected = [1] * 5 + [0] + [1] * 6 + [0] + [0] * 3  # last position of each piece and padding masked
    assert x["loss_mask"].dtype == torch.float32 and x["loss_mask"].tolist() == expected
    # Any megatron-core tool reads the shard: sequences are the pieces, one document per packed sequence.
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    raw = IndexedDataset(str(tmp_path / "train" / "00000"))
    assert raw.sequence_lengths.tolist() == [6, 7, 3] and raw.document_indices.tolist() == [0, 3]
    assert raw[1].tolist() == list(range(20, 27))
    assert (tmp_path / "train" / "00000.docs.txt").read_text() == "doc-a\ndoc-b\n"


def test_full_bin_has_no_padding_piece_and_uint16(tmp_path):
    _write(tmp_path, {"train": [[Piece(np.arange(1, 17), None, 0, "d")]]}, dtype=np.uint16)
    x = PackedDataset(tmp_path)[0]
    assert x["cu_seqlens"].tolist() == [0, 16]
    assert x["tokens"].tolist() == list(range(1, 17))
    assert x["loss_mask"].sum().item() == 15


def test_pad_multiple_pads_each_piece(tmp_path):
    a = Piece(np.arange(1, 6), None, 0, "a")  # 5 -> 8
    b = Piece(np.arange(1, 4), None, 1, "b")  # 3 -> 4
    stats = _write(tmp_path, {"train": [[a, b]]}, pad_multiple=4)
    assert stats["padding_tokens"] == 3 + 1 + 4
    x = PackedDataset(tmp_path)[0]
    assert x["cu_seqlens"].tolist() == [0, 8, 12, 16]
    assert x["cu_seqlens_unpadded"].tolist() == [0, 5, 8, 12]
    assert x["source_ids"].tolist() == [0] * 5 + [-1] * 3 + [1] * 3 + [-1] * 5
    assert x["loss_mask"].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]


def test_loss_spans_mask(tmp_path):
    # Target tokens 3..5 of the trace: positions 2..4 predict them; position 5 is the piece's last.
    m = np.array([0, 0, 0, 1, 1, 1], np.uint8)
    t = Piece(np.arange(30, 36), m, 1, "trace")
    r = Piece(np.arange(40, 44), None, 0, "repo")
    _write(tmp_path, {"train": [[t, r]]}, masks=True)
    x = PackedDataset(tmp_path)[0]
    assert x["loss_mask"].tolist() == [0, 0, 1, 1, 1, 0] + [1, 1, 1, 0] + [0] * 6


def test_empty_split_reads_as_empty(tmp_path):
    _write(tmp_path, {"train": [[Piece(np.arange(4), None, 0, "d")]], "valid": []})
    assert len(PackedDataset(tmp_path, "valid")) == 0 and len(PackedDataset(tmp_path, "train")) == 1


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        PackedDataset(tmp_path)
    _write(tmp_path, {"train": [[Piece(np.arange(4), None, 0, "d")]]})
    with pytest.raises(KeyError, match="valid"):
        PackedDataset(tmp_path, split="valid")
    with pytest.raises(IndexError, match="out of range"):
        PackedDataset(tmp_path)[1]
    w = PackedShardWriter(shard_prefix(tmp_path, "x", 0), seq_length=S, pad_id=PAD, dtype=np.int32)
    with pytest.raises(ValueError, match="more than seq_length"):
        w.add([Piece(np.arange(17), None, 0, "big")])


def _many(tmp_path, n=11):
    _write(tmp_path, {"train": [[Piece(np.full(5, i + 1), None, i % 2, f"d{i}")] for i in range(n)]})
    return PackedDataset(tmp_path)


def _take(loader, k):
    it = iter(loader)
    return [int(next(it)["index"]) for _ in range(k)]


def test_loader_epochs_ranks_and_exact_resume(tmp_path):
    ds = _many(tmp_path, 11)
    ranks = [PackedLoader(ds, seed=3, dp_rank=r, dp_size=2) for r in range(2)]
    first = [_take(loader, 5) for loader in ranks]
    assert len(ranks[0]) == 5
    assert not set(first[0]) & set(first[1]) and len(set(first[0] + first[1])) == 10  # an epoch, no repeats
    # Next epoch reshuffles; same seed gives the same stream, another seed another one.
    e1 = _take(ranks[0], 5)
    assert ranks[0].epoch == 1 and e1 != first[0]
    assert _take(PackedLoader(ds, seed=3, dp_rank=0, dp_size=2), 10) == first[0] + e1
    assert _take(PackedLoader(ds, seed=4, dp_rank=0, dp_size=2), 10) != first[0] + e1

    # Resume mid-epoch and across an epoch boundary: exactly the continuation, nothing skipped or repeated.
    for stop in (3, 5, 7):
        ref = PackedLoader(ds, seed=3, dp_rank=1, dp_size=2)
        whole = _take(ref, stop + 6)
        a = PackedLoader(ds, seed=3, dp_rank=1, dp_size=2)
        head = _take(a, stop)
        b = PackedLoader(ds, seed=3, dp_rank=1, dp_size=2)
        b.load_state_dict(json.loads(json.dumps(a.state_dict())))
        assert head + _take(b, 6) == whole
    # Samples are bit-identical on re-read.
    assert torch.equal(ds[4]["tokens"], ds[4]["tokens"])


def test_loader_resume_with_other_dp_size(tmp_path):
    ds = _many(tmp_path, 12)
    a = [PackedLoader(ds, seed=0, dp_rank=r, dp_size=2) for r in range(2)]
    seen = [i for loader in a for i in _take(loader, 2)]  # 4 samples consumed
    b = [PackedLoader(ds, seed=0, dp_rank=r, dp_size=4) for r in range(4)]
    for loader in b:
        loader.load_state_dict(a[0].state_dict())
    rest = [i for loader in b for i in _take(loader, 2)]
    assert sorted(seen + rest) == list(range(12))
    # 4 consumed do not split over 3 ranks: the stream position is global, so 3 ranks take positions 4, 5, 6
    odd = [PackedLoader(ds, seed=0, dp_rank=r, dp_size=3) for r in range(3)]
    for loader in odd:
        loader.load_state_dict(a[0].state_dict())
    assert [i for loader in odd for i in _take(loader, 1)] == _take(PackedLoader(ds, seed=0), 7)[4:]
    with pytest.raises(ValueError, match="seed"):
        PackedLoader(ds, seed=1).load_state_dict(a[0].state_dict())


def _steps(loaders, steps: int, batch: int) -> list[list[int]]:
    """The dataset indices of each global batch (batch samples over all ranks), sorted."""
    per_rank = batch // len(loaders)
    return [sorted(i for loader in loaders for i in _take(loader, per_rank)) for _ in range(steps)]


def test_a_dp2_state_after_an_epoch_wrap_resumes_on_1_and_4_ranks_with_the_same_samples(tmp_path):
    """11 sequences, 4 a step: the epochs end mid-batch. DP=2 states at steps 3 and 9 continue on 1 and 4
    ranks with the global batches of an uninterrupted run (one global stream, its order independent of DP)."""
    ds = _many(tmp_path, 11)
    reference = _steps([PackedLoader(ds, seed=5)], 12, 4)
    assert sorted(i for step in reference[:11] for i in step) == sorted(list(range(11)) * 4)  # 4 whole epochs
    for saved in (3, 9):
        dp2 = [PackedLoader(ds, seed=5, dp_rank=r, dp_size=2) for r in range(2)]
        assert _steps(dp2, saved, 4) == reference[:saved]
        state = json.loads(json.dumps(dp2[0].state_dict()))
        assert state == dp2[1].state_dict()
        for dp in (1, 4):
            resumed = [PackedLoader(ds, seed=5, dp_rank=r, dp_size=dp) for r in range(dp)]
            for loader in resumed:
                loader.load_state_dict(state)
            assert _steps(resumed, 12 - saved, 4) == reference[saved:], (saved, dp)
