"""Audit packed shards: fill, padding, splits, per-source target vs achieved tokens and piece-length
histograms (text, JSON, PNG), and decoded samples with their document boundaries marked."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from midtrain.formats.shard_reader import PackedDataset, load_manifest
from midtrain.formats.tokenizer import default_tokenizer_path, load_tokenizer, tokenizer_hash


def summarize(shard_dir: str | Path) -> dict:
    """The JSON `midtrain inspect --json` prints (a digest of manifest.json)."""
    m = load_manifest(shard_dir)
    splits = m["splits"]
    tasks = splits["train"]["tasks"]
    fills = [t["fill"] for t in tasks if t["sequences"]]
    return {
        "shard_dir": str(shard_dir),
        "seq_length": m["seq_length"],
        "sequences": m["sequences"],
        "tokens": m["tokens"],
        "padding_tokens": m["padding_tokens"],
        "fill": m["fill"],
        "split_documents": m["split_documents"],
        "pad_multiple": m["pad_multiple"],
        "masks": m["masks"],
        "mixture": m["mixture"],
        "seed": m["seed"],
        "tokenizer": m["tokenizer"].get("hash"),
        "task_fill": {"tasks": len(tasks), "min": min(fills, default=0.0), "max": max(fills, default=0.0)},
        "valid": {k: splits["valid"][k] for k in ("sequences", "tokens", "padding_tokens", "fill", "split_documents")},
        "sources": {
            name: {
                "target_tokens": s["target_tokens"],
                "tokens": s["tokens"],
                "valid_tokens": s["valid_tokens"],
                "rate": s["rate"],
                "capped": s["capped"],
                "pieces": s["pieces"],
                "length_histogram": s["length_histogram"],
            }
            for name, s in m["sources"].items()
        },
        "length_histogram_edges": m["length_histogram_edges"],
        "dropped_upstream": m.get("dropped_upstream", {}),
        "valid_overlap": m.get("valid_overlap"),
        "loss_free": {k: v["loss_free"] for k, v in m.get("splits", {}).items() if v.get("loss_free")},
    }


def _k(n: float) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return str(int(n))


def _edge(e: int) -> str:
    return f"{e // 1024}K" if e >= 1024 else str(e)


def format_summary(s: dict) -> str:
    lines = [
        f"{s['shard_dir']}: {s['sequences']} sequences x {s['seq_length']} tokens (train), mixture {s['mixture']}, "
        f"seed {s['seed']}",
        f"  fill {s['fill']:.4%}  padding {_k(s['padding_tokens'])} tokens  split documents {s['split_documents']}  "
        f"pad multiple {s['pad_multiple']}  loss masks {'yes' if s['masks'] else 'no'}",
        f"  per task fill: min {s['task_fill']['min']:.4%} max {s['task_fill']['max']:.4%} over "
        f"{s['task_fill']['tasks']} tasks",
        f"  valid: {s['valid']['sequences']} sequences, {_k(s['valid']['tokens'])} tokens, "
        f"fill {s['valid']['fill']:.2%}",
        "",
        f"  {'source':<12} {'target':>10} {'achieved':>10} {'ratio':>7} {'rate':>6} {'valid':>9} {'pieces':>7}",
    ]
    for name, src in s["sources"].items():
        ratio = f"{src['tokens'] / src['target_tokens']:.3f}" if src["target_tokens"] else "-"
        lines.append(
            f"  {name:<12} {_k(src['target_tokens']):>10} {_k(src['tokens']):>10} {ratio:>7} "
            f"{src['rate']:>6.2f} {_k(src['valid_tokens']):>9} {src['pieces']:>7}"
            + ("  (capped by max_repeat)" if src["capped"] else "")
        )
    edges = s["length_histogram_edges"]
    lines += ["", "  piece lengths (tokens) per source, train:"]
    for name, src in s["sources"].items():
        h = src["length_histogram"]
        if not any(h):
            continue
        cells = [
            f"{_edge(edges[i])}-{_edge(edges[i + 1]) if i + 1 < len(edges) else 'inf'}:{c}"
            for i, c in enumerate(h)
            if c
        ]
        lines.append(f"    {name:<12} " + "  ".join(cells))
    if s["dropped_upstream"]:
        lines.append(f"\n  dropped while tokenizing: {s['dropped_upstream']}")
    for split, lf in s.get("loss_free", {}).items():
        if lf["pieces"]:
            lines.append(f"  {split}: {lf['pieces']} pieces ({_k(lf['tokens'])} tokens) with no loss target not packed")
    if (v := s.get("valid_overlap")) and v["documents"]:
        lines.append(
            f"\n  dropped {v['documents']} training documents ({_k(v['tokens'])} tokens, {v['documents_by_source']}) "
            f"sharing a word {v['ngram_size']}-gram with one of {v['validation_documents']} validation documents "
            f"({v['reason']}; first: {v['examples'][0]['document']} ~ {v['examples'][0]['validation_document']})"
        )
    return "\n".join(lines)


def plot_histograms(s: dict, path: str | Path) -> Path:
    """A PNG with one bar chart of piece lengths per source."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    srcs = [(n, v) for n, v in s["sources"].items() if any(v["length_histogram"])]
    fig, axes = plt.subplots(len(srcs) or 1, 1, figsize=(9, 2.2 * max(len(srcs), 1)), squeeze=False)
    edges = s["length_histogram_edges"]
    shown = sum(e <= s["seq_length"] for e in edges)  # no piece is longer than a sequence
    labels = [_edge(e) for e in edges[:shown]]
    for ax, (name, src) in zip(axes[:, 0], srcs):
        ax.bar(range(len(labels)), src["length_histogram"][:shown], color="tab:blue")
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_ylabel("pieces")
        ax.set_title(f"{name}: {_k(src['tokens'])} tokens (target {_k(src['target_tokens'])})", fontsize=9)
    axes[-1, 0].set_xlabel(f"piece length, tokens (bin start); seq_length {s['seq_length']}, fill {s['fill']:.2%}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def decode_sample(
    shard_dir: str | Path, index: int, split: str = "train", tokenizer=None, max_chars_per_piece: int = 600
) -> str:
    """One packed sequence decoded, each piece under a marker line naming its document, part and source."""
    ds = PackedDataset(shard_dir, split)
    if tokenizer is None:
        tokenizer = tokenizer_for(ds.manifest)
    sample, rows = ds[index], ds.pieces(index)
    shard, j = ds.locate(index)
    doc_ids = Path(f"{shard.prefix}.docs.txt").read_text().splitlines()
    sources = list(ds.manifest["sources"])
    cu = sample["cu_seqlens"].tolist()
    tokens = sample["tokens"].numpy()
    out = [
        f"=== {split} sequence {index} ({shard.prefix.name}[{j}]): {len(rows)} pieces, "
        f"{int(sample['loss_mask'].sum())} loss positions ==="
    ]
    for k, row in enumerate(rows):
        a, b = cu[k], cu[k + 1]
        if row["source"] < 0:
            out.append(f"⟦padding: {b - a} tokens⟧")
            continue
        real = int(row["tokens"])
        text = tokenizer.decode(tokens[a : a + real].tolist())
        if len(text) > max_chars_per_piece:
            half = max_chars_per_piece // 2
            text = f"{text[:half]}\n … {len(text) - 2 * half} chars … \n{text[-half:]}"
        pad = f", +{b - a - real} pad" if b - a > real else ""
        out.append(
            f"⟦doc {doc_ids[row['doc']]} part {row['part'] + 1}/{row['parts']} source "
            f"{sources[row['source']]}: tokens {a}..{a + real}{pad}⟧"
        )
        out.append(text)
    return "\n".join(out)


def tokenizer_for(manifest: dict, override: str | None = None):
    """The tokenizer that made the shards: --tokenizer, the recorded file, or the default when hashes match.

    The process's shared copy (load_tokenizer(shared=True)): callers decode with it and set nothing on it.
    """

    if override:
        return load_tokenizer(override, shared=True)
    recorded = manifest.get("tokenizer", {})
    path = recorded.get("file")
    if path and Path(path).exists():
        return load_tokenizer(path, shared=True)
    default = default_tokenizer_path()
    if tokenizer_hash(default) == recorded.get("hash"):
        return load_tokenizer(default, shared=True)
    raise FileNotFoundError(f"the tokenizer these shards were made with ({path}) is not here; pass --tokenizer")


def sample_fill(shard_dir: str | Path, split: str = "train") -> np.ndarray:
    """Per-sequence fill read back from the shards (an independent check of the manifest)."""
    ds = PackedDataset(shard_dir, split)
    return np.array([ds.pieces(i)["tokens"][ds.pieces(i)["source"] >= 0].sum() / ds.seq_length for i in range(len(ds))])


def heldout_check(shard_dir: str | Path, split_file: str | Path | None = None) -> dict | None:
    """The training split of SHARD_DIR scanned by canonical id under the run's split (SPLIT_FILE, else the one
    the manifest names): its held-out instances (any spelling, attempt or linked issue) and fix commits found
    there, with their document ids. None when no split file is given or recorded."""
    # lazy: loads datatrove only when this runs
    from midtrain.formats.run_split import read, training_leaks

    applied = load_manifest(shard_dir).get("split") or {}
    path = split_file or applied.get("file")
    if not path:
        return None
    split = read(path)
    leaks = training_leaks(split, shard_dir)
    return {
        "split": str(path),
        "sha": split.sha,
        "pack_split_sha": applied.get("sha"),
        "heldout_instances": len(split.heldout_set),
        "in_training": len(leaks),
        "leaks": leaks,
        "counted": "instances",
    }


def format_heldout_check(c: dict) -> str:
    same = "" if c["pack_split_sha"] == c["sha"] else f" (the pack applied split {c['pack_split_sha']})"
    head = f"held-out check by canonical id, split {c['split']} ({c['sha']}){same}: "
    if not c["in_training"]:
        return head + f"none of its {c['heldout_instances']} held-out instances in the training split"
    found = ", ".join(f"{i} ({len(ids)} documents: {ids[0]}...)" for i, ids in sorted(c["leaks"].items())[:5])
    return head + f"{c['in_training']} held-out instances in the training split: {found}"
