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
from midtrain.formats.documents import read_jsonl
from midtrain.formats.shard_reader import PackedDataset
from midtrain.formats.tokenizer import load_tokenizer
from midtrain.formats.trace_split import iter_documents

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


def scan_shards(shard_dir: str | Path, index: NgramIndex, tokenizer: Any, split: str = "train") -> dict[str, Any]:
    """How much of INDEX the SPLIT sequences of SHARD_DIR contain (decoded with TOKENIZER: a loaded tokenizer,
    or its path, None for the default)."""
    tok = tokenizer if hasattr(tokenizer, "decode") else load_tokenizer(tokenizer, shared=True)
    ds = PackedDataset(shard_dir, split)
    found: set[int] = set()
    hit_sequences = 0
    by_key: dict[str, int] = {}
    for i in range(len(ds)):
        text = tok.decode(ds[i]["tokens"].tolist(), skip_special_tokens=True)
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


def scan_against_probe_data(data_dir: str | Path, shards: list[str], tokenizer: Any) -> list[dict[str, Any]]:
    """Scan each training shard dir for the probe's held-out traces (DATA_DIR/valid_docs, their scored assistant
    turns, less the n-grams the probe's training traces share: DATA_DIR/train_docs); [] without held-out traces."""
    root = Path(data_dir)
    if not (root / "valid_docs").is_dir():
        return []
    template = iter_documents(root / "train_docs") if (root / "train_docs").is_dir() else ()
    index = heldout_index(iter_documents(root / "valid_docs"), template)
    return [scan_shards(s, index, tokenizer) for s in shards]


def scan_against(heldout: str | Path, shards: list[str], tokenizer: Any) -> list[dict[str, Any]]:
    """``midtrain inspect --heldout``: HELDOUT is a probe's data dir (its valid_docs/) or a JSONL file of
    ``{"id", "text"}`` rows (the decontamination step's held-out file)."""
    path = Path(heldout)
    if (path / "valid_docs").is_dir():
        return scan_against_probe_data(path, shards, tokenizer)
    if path.is_file():
        rows = []
        for i, row in read_jsonl(path):
            if not isinstance(row.get("text"), str):
                raise ValueError(f"{path}: line {i}: a held-out row needs a 'text' string")
            rows.append(row)
        return [scan_shards(s, heldout_index(rows), tokenizer) for s in shards]
    raise FileNotFoundError(f"--heldout {path}: neither a probe data dir (valid_docs/) nor a JSONL file")


def split_index(shard_dir: str | Path, split: str, tokenizer: Any, n: int = 13) -> NgramIndex:
    """The n-grams of a packed split's documents of wholly scored sources (the proxy's held-out documents: the
    reference pack's validation split; code and commits, not trajectories, whose scored assistant turns share the
    agent's phrasing with every trajectory: the rule the pack decontaminates by, midtrain.pack.valid_overlap),
    one key per sequence and piece."""
    tok = tokenizer if hasattr(tokenizer, "decode") else load_tokenizer(tokenizer, shared=True)
    ds = PackedDataset(shard_dir, split)
    pieces: list[tuple[int, int, int, list[int]]] = []  # (sequence, piece, source, its tokens)
    partial: set[int] = set()  # sources with a token left unscored: loss spans
    for i in range(len(ds)):
        s = ds[i]
        cu = s["cu_seqlens"].tolist()
        for p, (a, b) in enumerate(zip(cu[:-1], cu[1:])):
            src = int(s["source_ids"][a])
            if src < 0 or b - a < 2:  # padding
                continue
            # every target but the piece's last (a cross-document target is never scored)
            if not bool(s["loss_mask"][a : b - 1].all()):
                partial.add(src)
            pieces.append((i, p, src, s["tokens"][a:b].tolist()))
    index = NgramIndex(n)
    for i, p, src, ids in pieces:
        if src not in partial:
            index.add(f"{split}:{i}:{p}", tok.decode(ids, skip_special_tokens=True))
    return index
