"""Reader throughput: PackedDataset samples (tokens, labels, loss mask, cu_seqlens, position and source ids)
vs a raw read of the same .bin (memory-mapped slices converted to int64), same shards, same run.

Times are CPU time of this (single-threaded) process. Shards are written with the real writer: random token ids in
pieces of a realistic length mix, at
--seq-length (default 32768), with and without loss masks.

    .venv/bin/python bench/bench_reader.py [--tokens 6e7] [--json out.json]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np


def build(out: Path, tokens: float, S: int, masks: bool, seed: int = 0) -> None:
    from midtrain.formats.shards import PackedShardWriter, Piece, shard_prefix
    from midtrain.pack.packer import best_fit_decreasing

    rng = np.random.default_rng(seed)
    lengths: list[int] = []
    while sum(lengths) < tokens:
        lengths.extend(np.clip(rng.lognormal(np.log(3000), 1.3, 4096), 16, S).astype(int).tolist())
    bins = best_fit_decreasing(lengths, S)
    w = PackedShardWriter(
        shard_prefix(out, "train", 0), seq_length=S, pad_id=0, dtype=np.int32, with_masks=masks, sources=["a", "b"]
    )
    for b in bins:
        w.add(
            [
                Piece(
                    rng.integers(0, 151_000, lengths[i], dtype=np.int32),
                    rng.integers(0, 2, lengths[i], dtype=np.uint8) if masks else None,
                    i % 2,
                    f"d{i}",
                )
                for i in b
            ]
        )
    w.finalize()
    (out / "manifest.json").write_text(
        json.dumps(
            {
                "seq_length": S,
                "pad_id": 0,
                "masks": masks,
                "sources": {"a": {}, "b": {}},
                "splits": {"train": {"shards": ["train/00000"]}},
            }
        )
    )


def raw_read(out: Path, S: int) -> tuple[float, int]:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    ds = IndexedDataset(str(out / "train" / "00000"))
    starts = ds.document_indices[:-1]
    t0 = time.process_time()
    total = 0
    for first in starts:
        total += int(np.asarray(ds.get(int(first), 0, S), dtype=np.int64)[-1] >= 0) * S
    return time.process_time() - t0, total


def reader_read(out: Path) -> tuple[float, int]:
    from midtrain.formats.shard_reader import PackedDataset

    ds = PackedDataset(out)
    t0 = time.process_time()
    total = 0
    for i in range(len(ds)):
        total += ds[i]["tokens"].numel()
    return time.process_time() - t0, total


def main() -> int:
    from figures import bench_parser

    ap = bench_parser(__doc__)
    ap.add_argument("--tokens", type=float, default=6e7)
    ap.add_argument("--seq-length", type=int, default=32768)
    args = ap.parse_args()
    if args.smoke:
        args.tokens, args.seq_length = 2e5, 2048
    warnings.filterwarnings("ignore")
    S = args.seq_length
    figures, rows = {"seq_length": S}, []
    for masks in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            build(out, args.tokens, S, masks)
            raw_read(out, S)  # warm the page cache for both
            best_raw = min(raw_read(out, S)[0] for _ in range(2))
            n = reader_read(out)[1]
            best_rd = min(reader_read(out)[0] for _ in range(2))
            raw_tps, rd_tps = n / best_raw, n / best_rd
            label = "with masks" if masks else "no masks"
            rows.append((label, n, raw_tps, rd_tps))
            figures[label.replace(" ", "_")] = {
                "tokens": n,
                "raw_tokens_per_s": round(raw_tps),
                "reader_tokens_per_s": round(rd_tps),
                "reader_over_raw": round(rd_tps / raw_tps, 4),
            }
    print(f"{'shards':<12} {'tokens':>12} {'raw .bin tok/s':>15} {'reader tok/s':>14} {'reader/raw':>11}")
    for label, n, r, d in rows:
        print(f"{label:<12} {n:>12,} {r:>15.3g} {d:>14.3g} {d / r:>11.3f}")
    print("(a training step at this length consumes ~1e4-1e5 tokens/s per GPU; the reader needs only to beat that)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
