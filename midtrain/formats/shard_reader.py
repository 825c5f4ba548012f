"""Trainer-side reader of packed shards: a memory-mapped dataset and a resumable loader.

``PackedDataset(shard_dir, split)`` serves one packed sequence per index as THD tensors (micro-batch 1):
tokens, next-token labels, a loss mask (0 on padding, on the last position of every document piece — its
next token belongs to another document — and outside ``loss_spans`` when the shards carry masks),
cu_seqlens over the pieces (padding piece included), per-piece position ids and per-token source ids.

``PackedLoader(dataset, seed, dp_rank, dp_size)`` walks one global stream of samples, a seeded permutation
per epoch laid end to end, the ranks taking interleaved positions of it; ``state_dict()`` holds the position
in that stream (epoch, and samples of it consumed by all ranks), which does not depend on the number of ranks:
a resume continues exactly where it stopped at any data-parallel size, and every epoch reshuffles from the
seed alone (as megatron's samplers keep one global sample count).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from midtrain.formats.shards import PADDING_SOURCE
from midtrain.locations import as_path, is_url

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


def load_manifest(shard_dir: str | Path) -> dict:
    """manifest.json of a shard directory (a local path or a URL)."""
    path = as_path(shard_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{shard_dir}: no {MANIFEST} (not a `midtrain pack` output, or packing did not finish)")
    return json.loads(path.read_text())


_IDX_HEAD = 9 + 8 + 1 + 8 + 8  # megatron's .idx header: magic, version, dtype code, sequence and document counts


def _check_index_size(idx: Path) -> None:
    """Refuse a truncated .idx before megatron-core opens it: its IndexedDataset, left half-built by a failed
    read, raises AttributeError in ``__del__`` whenever the garbage collector gets to it (at a random later
    point: a SystemError out of an unrelated ``ast.parse``, say)."""
    import struct

    size = idx.stat().st_size
    with open(idx, "rb") as f:
        head = f.read(_IDX_HEAD)
    if len(head) < _IDX_HEAD:
        raise ValueError(f"{idx}: {size} bytes, shorter than an index header; the shard is truncated or corrupt")
    sequences, documents = struct.unpack("<QQ", head[18:34])
    expected = _IDX_HEAD + sequences * (4 + 8) + documents * 8  # int32 lengths, int64 pointers and doc indices
    if size < expected:
        raise ValueError(f"{idx}: {size} bytes, its header promises {expected}; the shard is truncated or corrupt")


def _open_indexed(prefix: Path):
    """Open a Megatron indexed dataset, refusing a truncated or garbled .idx/.bin with the file named."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    _check_index_size(Path(f"{prefix}.idx"))
    try:
        ds = IndexedDataset(str(prefix), mmap=True)
    except Exception as e:
        raise ValueError(f"{prefix}.idx: unreadable index ({e}); the shard is truncated or corrupt") from e
    expected = int(ds.sequence_lengths.astype(np.int64).sum()) * np.dtype(ds.index.dtype).itemsize
    actual = Path(f"{prefix}.bin").stat().st_size
    if actual != expected:
        raise ValueError(
            f"{prefix}.bin: {actual} bytes, the index expects {expected}; the shard is truncated or "
            "corrupt (re-run `midtrain pack`)"
        )
    return ds


class _Shard:
    def __init__(self, prefix: Path, masks: bool) -> None:
        self.prefix = prefix
        self.ids = _open_indexed(prefix)
        self.masks = _open_indexed(Path(f"{prefix}.mask")) if masks else None
        # Memory-mapped, viewed as a plain ndarray: slicing a np.memmap costs ~1 ms per call in __array_finalize__.
        self.pieces = np.load(f"{prefix}.pieces.npy", mmap_mode="r").view(np.ndarray)
        self.doc_index = self.ids.document_indices  # sequence (piece) offsets of each packed sequence
        if len(self.pieces) != len(self.ids.sequence_lengths):
            raise ValueError(
                f"{prefix}: piece table has {len(self.pieces)} rows for "
                f"{len(self.ids.sequence_lengths)} index sequences (shard corrupt or mixed up)"
            )

    def __len__(self) -> int:
        return len(self.doc_index) - 1


class PackedDataset(torch.utils.data.Dataset):
    """Packed sequences of one split, memory-mapped from the shard files listed in manifest.json."""

    def __init__(self, shard_dir: str | Path, split: str = "train") -> None:
        if is_url(shard_dir):
            raise ValueError(
                f"{shard_dir}: shards in object storage cannot be memory-mapped; copy the directory to "
                f"a filesystem first (e.g. `aws s3 sync {shard_dir} DIR`) and read DIR"
            )
        self.shard_dir = Path(shard_dir)
        self.manifest = load_manifest(self.shard_dir)
        splits = self.manifest.get("splits", {})
        if split not in splits:
            raise KeyError(f"{shard_dir}: no split '{split}' (has {sorted(splits)})")
        self.split = split
        self.seq_length = int(self.manifest["seq_length"])
        self.pad_id = int(self.manifest["pad_id"])
        masks = bool(self.manifest.get("masks", False))
        self._shards = [s for s in (self._open_shard(name, masks) for name in splits[split]["shards"]) if s]
        self._offsets = np.cumsum([0] + [len(s) for s in self._shards])
        listed = splits[split].get("sequences")
        if listed is not None and len(self) != int(listed):
            raise ValueError(
                f"{self.shard_dir}: {split} shards hold {len(self)} sequences, manifest.json lists "
                f"{listed}; the shards are truncated or mixed up (re-run `midtrain pack`)"
            )

    def _open_shard(self, name: str, masks: bool) -> _Shard | None:
        """One shard the manifest lists, checked against its count there: a missing, emptied or cut shard
        stops the reader naming the file (training on part of the data would go unnoticed)."""
        counts = {
            f"{self.split}/{int(t['task']):05d}": int(t["sequences"])
            for t in self.manifest["splits"][self.split].get("tasks", [])
        }
        expected = counts.get(name)
        bin_path = self.shard_dir / f"{name}.bin"
        if not bin_path.exists():
            raise FileNotFoundError(f"{bin_path}: listed in manifest.json but missing (re-run `midtrain pack`)")
        if bin_path.stat().st_size == 0:
            if not expected:  # a task with nothing for this split leaves an empty shard (cannot be memory-mapped)
                return None
            raise ValueError(
                f"{bin_path}: empty, but manifest.json lists {expected} sequences in it; the shard is "
                "truncated or corrupt (re-run `midtrain pack`)"
            )
        shard = _Shard(self.shard_dir / name, masks)
        if expected is not None and len(shard) != expected:
            raise ValueError(
                f"{bin_path}: {len(shard)} sequences, manifest.json lists {expected}; the shard is "
                "truncated or mixed up (re-run `midtrain pack`)"
            )
        return shard

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def locate(self, index: int) -> tuple[Any, int]:
        """(shard, index within it) of a global sequence index."""
        if not 0 <= index < len(self):
            raise IndexError(f"sequence {index} out of range [0, {len(self)}) in {self.shard_dir} ({self.split})")
        k = int(np.searchsorted(self._offsets, index, side="right")) - 1
        return self._shards[k], index - int(self._offsets[k])

    def pieces(self, index: int) -> np.ndarray:
        """The piece table rows (source, tokens, doc, part, parts) of one packed sequence, padding piece included."""
        shard, j = self.locate(index)
        return np.asarray(shard.pieces[shard.doc_index[j] : shard.doc_index[j + 1]])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        shard, j = self.locate(int(index))
        first, last = int(shard.doc_index[j]), int(shard.doc_index[j + 1])
        S = self.seq_length
        tokens = np.asarray(shard.ids.get(first, 0, S), dtype=np.int64)
        lengths = np.asarray(shard.ids.sequence_lengths[first:last], dtype=np.int64)  # padded piece lengths
        rows = np.asarray(shard.pieces[first:last])
        real = rows["tokens"].astype(np.int64)
        if tokens.shape[0] != S or lengths.sum() != S:
            raise ValueError(f"{shard.prefix}: packed sequence {j} has {lengths.sum()} tokens, expected {S}")
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        piece_of = np.repeat(np.arange(len(lengths)), lengths)
        offset = np.arange(S) - starts[piece_of]
        is_real = (offset < real[piece_of]) & (rows["source"][piece_of] != PADDING_SOURCE)

        labels = np.empty(S, np.int64)
        labels[:-1] = tokens[1:]
        labels[-1] = self.pad_id
        # A position is trained when it and its next token are real tokens of the same piece.
        loss_mask = np.zeros(S, np.float32)
        loss_mask[:-1] = is_real[:-1] & is_real[1:] & (piece_of[:-1] == piece_of[1:])
        if shard.masks is not None:
            target = np.asarray(shard.masks.get(first, 0, S), dtype=np.float32)
            loss_mask[:-1] *= target[1:]  # the label at p is token p+1: train only on target tokens
        source_ids = np.where(is_real, rows["source"][piece_of].astype(np.int64), PADDING_SOURCE)
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        cu_unpadded_lengths = np.where(rows["source"] == PADDING_SOURCE, lengths, real)
        return {
            "tokens": torch.from_numpy(tokens),
            "labels": torch.from_numpy(labels),
            "loss_mask": torch.from_numpy(loss_mask),
            "cu_seqlens": torch.from_numpy(cu),
            # Real tokens per piece (TE THD with pad_multiple > 1 takes both padded and unpadded bounds).
            "cu_seqlens_unpadded": torch.from_numpy(
                np.concatenate([[0], np.cumsum(cu_unpadded_lengths)]).astype(np.int32)
            ),
            "position_ids": torch.from_numpy(offset),
            "source_ids": torch.from_numpy(source_ids),
        }


class PackedLoader:
    """Deterministic, resumable iteration over a PackedDataset for one data-parallel rank (micro-batch 1).

    Every epoch is a permutation drawn from (seed, epoch), the epochs laid end to end in one global stream;
    rank r takes positions r, r + dp_size, ... of the stream from where it stands, so the samples of a global
    batch are the same at every dp_size (a batch may straddle two epochs). Iterates forever; ``epoch`` and
    ``consumed`` (samples of this epoch taken by all ranks) are the state, the same on every rank.
    """

    def __init__(self, dataset: PackedDataset, seed: int, dp_rank: int = 0, dp_size: int = 1) -> None:
        if not 0 <= dp_rank < dp_size:
            raise ValueError(f"dp_rank={dp_rank} must be in [0, dp_size={dp_size})")
        if len(dataset) == 0:
            raise ValueError(f"{dataset.shard_dir}: no packed sequences in split {dataset.split}; pack more data")
        self.dataset, self.seed, self.dp_rank, self.dp_size = dataset, int(seed), dp_rank, dp_size
        self.per_epoch = len(dataset) // dp_size  # whole samples per rank per epoch (len(); epochs run on)
        self.epoch = 0
        self.consumed = 0  # samples of the current epoch taken by all ranks together
        self._perms: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.per_epoch

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) > 1:  # a rank reads at most two epochs at a time (a batch across the boundary)
                self._perms.pop(min(self._perms))
            self._perms[epoch] = np.random.Generator(np.random.PCG64([self.seed, epoch])).permutation(len(self.dataset))
        return self._perms[epoch]

    def next_index(self) -> int:
        """The dataset index this rank reads next, advancing the state."""
        n = len(self.dataset)
        epoch, position = divmod(self.epoch * n + self.consumed + self.dp_rank, n)
        index = int(self._permutation(epoch)[position])
        self.epoch, self.consumed = divmod(self.epoch * n + self.consumed + self.dp_size, n)
        return index

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            index = self.next_index()
            sample = self.dataset[index]
            sample["index"] = torch.tensor(index)
            yield sample

    def state_dict(self) -> dict[str, int]:
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "consumed": self.consumed,
            "dp_size": self.dp_size,
            "num_sequences": len(self.dataset),
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        if int(state["seed"]) != self.seed:
            raise ValueError(
                f"loader state has seed {state['seed']}, this loader {self.seed}: resuming would "
                "change the sample order"
            )
        if int(state["num_sequences"]) != len(self.dataset):
            raise ValueError(
                f"loader state is for {state['num_sequences']} sequences, the dataset has "
                f"{len(self.dataset)}: the shards changed since the checkpoint"
            )
        # The stream position is the same at any dp_size (state["dp_size"] is the writer's, for the record).
        self.epoch, self.consumed = divmod(
            int(state["epoch"]) * len(self.dataset) + int(state["consumed"]), len(self.dataset)
        )
