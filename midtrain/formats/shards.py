"""The packed shard format: Megatron indexed datasets plus small sidecars, written one shard per pack task.

A shard is a path prefix ``DIR/<split>/<task:05d>`` with:

- ``.bin/.idx``       token ids (uint16 for vocabularies <= 65,536, else int32). One index *document* is one
                      packed sequence of exactly ``seq_length`` tokens; its *sequences* are the document
                      pieces (each padded to ``pad_multiple``) and a final padding piece when the bin is not
                      full. Any megatron-core tool reads it (``IndexedDataset(prefix)``).
- ``.mask.bin/.idx``  only when documents carry ``loss_spans``: a uint8 dataset with the same layout, 1 where
                      the token is a loss *target* (inside a span); the reader shifts it onto positions.
- ``.pieces.npy``     one row per index sequence: source index (-1 for the padding piece), real tokens
                      before piece padding, document row in ``.docs.txt``, part number and part count.
- ``.docs.txt``       the ids of the documents in the shard, one a line (for audits and `midtrain inspect`).
- ``.stats.json``     what the task packed: per-source tokens, padding, splits, length histograms.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# megatron-core logs every index it opens at INFO; one line per shard drowns what people need to read.
logging.getLogger("megatron.core.datasets.indexed_dataset").setLevel(logging.WARNING)

PIECE_DTYPE = np.dtype(
    [("source", np.int16), ("tokens", np.int32), ("doc", np.int64), ("part", np.int32), ("parts", np.int32)]
)
PADDING_SOURCE = -1
# Length histogram bin edges (tokens): powers of two up to the longest context we pack.
HIST_EDGES = [0] + [2**k for k in range(4, 21)]


def token_dtype(vocab_size: int) -> type[np.number]:
    """uint16 up to 65,536 ids, else int32 (megatron-core's indexed format has no uint32)."""
    return np.uint16 if vocab_size <= 65536 else np.int32


def shard_prefix(out_dir: str | Path, split: str, task: int) -> Path:
    return Path(out_dir) / split / f"{task:05d}"


def padded_length(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclass
class Piece:
    """A slice of one document placed in a packed sequence."""

    tokens: np.ndarray  # token ids
    mask: np.ndarray | None  # uint8 per-token target mask, or None = every token is a target
    source: int  # index into the manifest's source list
    doc_id: str
    part: int = 0
    parts: int = 1


def histogram(lengths: list[int] | np.ndarray) -> list[int]:
    counts, _ = np.histogram(np.asarray(lengths, dtype=np.int64), bins=HIST_EDGES + [2**62])
    return counts.tolist()


class PackedShardWriter:
    """Writes packed sequences of one task's shard (tokens, optional masks, piece table, doc ids)."""

    def __init__(
        self,
        prefix: str | Path,
        *,
        seq_length: int,
        pad_id: int,
        dtype: type[np.number],
        pad_multiple: int = 1,
        with_masks: bool = False,
        sources: list[str] | None = None,
    ) -> None:
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

        self.prefix = Path(prefix)
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self.seq_length, self.pad_id, self.pad_multiple = seq_length, pad_id, pad_multiple
        self.dtype = dtype
        self.sources = sources or []
        # Write under a temporary name and rename in finalize(): a shard that exists is complete.
        self._tmp = self.prefix.with_name(self.prefix.name + ".tmp")
        self._ids = IndexedDatasetBuilder(f"{self._tmp}.bin", dtype=dtype)
        self._masks = IndexedDatasetBuilder(f"{self._tmp}.mask.bin", dtype=np.uint8) if with_masks else None
        self._pieces: list[tuple] = []
        self._docs: dict[str, int] = {}
        self.sequences = 0
        self.padding_tokens = 0  # final padding pieces + per-piece padding
        self.tokens_by_source: dict[int, int] = {}
        self.piece_lengths_by_source: dict[int, list[int]] = {}
        self.fills: list[float] = []

    def add(self, pieces: list[Piece]) -> None:
        """Write one packed sequence holding ``pieces`` (in order), padded to exactly seq_length."""
        lengths, chunks, masks = [], [], []
        for p in pieces:
            n = len(p.tokens)
            padded = padded_length(n, self.pad_multiple)
            lengths.append(padded)
            chunks.append(np.asarray(p.tokens, dtype=self.dtype))
            if self._masks is not None:
                masks.append(np.ones(n, np.uint8) if p.mask is None else np.asarray(p.mask, np.uint8))
            if padded > n:
                chunks.append(np.full(padded - n, self.pad_id, dtype=self.dtype))
                if self._masks is not None:
                    masks.append(np.zeros(padded - n, np.uint8))
            doc = self._docs.setdefault(p.doc_id, len(self._docs))
            self._pieces.append((p.source, n, doc, p.part, p.parts))
            self.tokens_by_source[p.source] = self.tokens_by_source.get(p.source, 0) + n
            self.piece_lengths_by_source.setdefault(p.source, []).append(n)
            self.padding_tokens += padded - n
        used = sum(lengths)
        if used > self.seq_length:
            raise ValueError(
                f"{self.prefix}: pieces take {used} tokens (padded), more than seq_length={self.seq_length}"
            )
        real = sum(len(p.tokens) for p in pieces)
        if used < self.seq_length:
            pad = self.seq_length - used
            lengths.append(pad)
            chunks.append(np.full(pad, self.pad_id, dtype=self.dtype))
            if self._masks is not None:
                masks.append(np.zeros(pad, np.uint8))
            self._pieces.append((PADDING_SOURCE, pad, -1, 0, 1))
            self.padding_tokens += pad
        self._ids.add_document(np.concatenate(chunks), lengths)
        if self._masks is not None:
            self._masks.add_document(np.concatenate(masks), lengths)
        self.sequences += 1
        self.fills.append(real / self.seq_length)

    def finalize(self, extra_stats: dict | None = None) -> dict:
        """Close the files, rename them into place and return (and write) the shard's stats."""
        self._ids.finalize(f"{self._tmp}.idx")
        names = [".bin", ".idx"]
        if self._masks is not None:
            self._masks.finalize(f"{self._tmp}.mask.idx")
            names += [".mask.bin", ".mask.idx"]
        np.save(f"{self._tmp}.pieces.npy", np.array(self._pieces, dtype=PIECE_DTYPE))
        Path(f"{self._tmp}.docs.txt").write_text("".join(f"{d}\n" for d in self._docs))
        for suffix in names + [".pieces.npy", ".docs.txt"]:
            Path(f"{self._tmp}{suffix}").replace(f"{self.prefix}{suffix}")
        real = sum(self.tokens_by_source.values())
        stats = {
            "prefix": self.prefix.name,
            "sequences": self.sequences,
            "tokens": real,
            "padding_tokens": self.padding_tokens,
            "fill": real / (self.sequences * self.seq_length) if self.sequences else 0.0,
            "min_fill": min(self.fills, default=0.0),
            "masks": self._masks is not None,
            "documents": len(self._docs),
            "tokens_by_source": {self._name(s): n for s, n in sorted(self.tokens_by_source.items())},
            "pieces_by_source": {self._name(s): len(v) for s, v in sorted(self.piece_lengths_by_source.items())},
            "length_histogram_by_source": {
                self._name(s): histogram(v) for s, v in sorted(self.piece_lengths_by_source.items())
            },
            **(extra_stats or {}),
        }
        Path(f"{self.prefix}.stats.json").write_text(json.dumps(stats, indent=1))
        return stats

    def _name(self, source: int) -> str:
        return self.sources[source] if 0 <= source < len(self.sources) else str(source)
