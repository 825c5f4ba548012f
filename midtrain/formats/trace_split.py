"""The held-out split of a trace set: decided once, recorded in PREP_DIR/heldout.json, read by every pack.

The SFT probe scores held-out traces; every pack (midtraining mixtures and the probe's own training data)
leaves them out. Whoever first needs the split (``midtrain pack`` on the trace set, or the probe) decides it
from the set's documents and records it; everyone after reads the record, so there is one split per set.

The split is by task, not by document: documents are grouped by instance (the ``{instance_id}`` of the trace
reader's ``trace:{instance_id}:{where}`` ids; two attempts at one task land on one side), or by repository
when the set spans enough repositories (at least ``max(MIN_REPOSITORIES, 2 / fraction)``) that whole
repositories can be held out. Groups are ranked by a fixed hash of their key (no seed: a probe seed changes
training, never the yardstick) and taken until ``fraction`` of the documents are held out (at least one group
when there are two, never all). Membership is by group, so a document added to the set later follows its
instance's (or repository's) side.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, overload

SPLIT_FILE = "heldout.json"
DEFAULT_FRACTION = 0.1
MIN_REPOSITORIES = 20
_DOC_GLOB = "*.jsonl*"


def instance_of(doc_id: str) -> str:
    """The task a trace document attempts: its id's instance part, or the id itself when unknown."""
    parts = str(doc_id).split(":", 2)
    if len(parts) == 3 and parts[0] == "trace" and parts[1] not in ("", "unknown", "None"):
        return parts[1]
    return str(doc_id)


def group_of(split: dict[str, Any], doc_id: str, repo: str | None) -> str:
    return str(repo) if split["by"] == "repository" else instance_of(doc_id)


def is_heldout(split: dict[str, Any], doc_id: str, repo: str | None) -> bool:
    """Whether a document of the trace set is on the held-out side of SPLIT."""
    groups = split.get("_groups")
    if groups is None:
        groups = split["_groups"] = frozenset(split["heldout_groups"])
    return group_of(split, doc_id, repo) in groups


def _rank(key: str) -> str:
    return hashlib.blake2b(f"midtrain-heldout:{key}".encode(), digest_size=8).hexdigest()


def decide_split(docs: list[tuple[str, str | None]], fraction: float, decided_by: str = "") -> dict[str, Any]:
    """The split of (doc id, repository) pairs; see the module doc."""
    if not 0 < fraction < 1:
        raise ValueError(f"held-out fraction {fraction} must be in (0, 1)")
    repos = {r for _, r in docs}
    by_repo = None not in repos and "" not in repos and len(repos) >= max(MIN_REPOSITORIES, math.ceil(2 / fraction))
    split: dict[str, Any] = {"version": 1, "fraction": fraction, "by": "repository" if by_repo else "instance"}
    sizes: dict[str, int] = {}
    for doc_id, repo in docs:
        g = group_of(split, doc_id, repo)
        sizes[g] = sizes.get(g, 0) + 1
    held: list[str] = []
    goal, taken = fraction * len(docs), 0
    for g in sorted(sizes, key=_rank)[: max(len(sizes) - 1, 0)]:
        if held and taken + sizes[g] / 2 > goal:
            break
        held.append(g)
        taken += sizes[g]
    split.update(heldout_groups=sorted(held), groups=len(sizes), documents=len(docs), decided_by=decided_by)
    split["heldout_ids"] = sorted(d for d, r in docs if is_heldout(split, d, r))
    split.pop("_groups")
    return split


def read_split(prep_dir: str | Path) -> dict[str, Any] | None:
    from midtrain.locations import as_path

    path = as_path(prep_dir) / SPLIT_FILE
    return json.loads(path.read_text()) if path.exists() else None


def _iter_docs(prep_dir: str | Path, first_only: bool = False) -> Iterator[dict]:
    from midtrain.locations import as_path

    for f in sorted((as_path(prep_dir) / "documents").glob(_DOC_GLOB)):
        with f.open("rb") as raw:
            fh = gzip.GzipFile(fileobj=raw) if f.name.endswith(".gz") else raw
            for line in fh:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue  # counted by the reader that uses the documents
                if isinstance(doc, dict) and doc.get("id"):
                    yield doc
                    if first_only:
                        return


def _source(doc: dict) -> str | None:
    meta = doc.get("metadata")
    return meta.get("source") if isinstance(meta, dict) else None


@overload
def ensure_split(prep_dir: str | Path, fraction: float | None = ..., decided_by: str = ...,
                 only_traces: Literal[False] = ...) -> dict[str, Any]: ...
@overload
def ensure_split(prep_dir: str | Path, fraction: float | None = ..., decided_by: str = ...,
                 only_traces: bool = ...) -> dict[str, Any] | None: ...
def ensure_split(prep_dir: str | Path, fraction: float | None = None, decided_by: str = "",
                 only_traces: bool = False) -> dict[str, Any] | None:
    """The recorded split of a trace set (decided from its documents and recorded when there is none).

    ``fraction``: the caller's held-out share (None = the record's, or DEFAULT_FRACTION when deciding); one that
    differs from the record is refused. ``only_traces``: None, without reading further, for a set whose first
    document is not a trace (a pack input of another source).
    """
    split = read_split(prep_dir)
    if split is None:
        if only_traces and not any(_source(d) == "trace" for d in _iter_docs(prep_dir, first_only=True)):
            return None
        docs = [(str(d["id"]), (d.get("metadata") or {}).get("repo")) for d in _iter_docs(prep_dir)
                if _source(d) in (None, "trace")]
        split = decide_split(docs, DEFAULT_FRACTION if fraction is None else fraction, decided_by)
        split = _record(prep_dir, split)
    if fraction is not None and abs(split["fraction"] - fraction) > 1e-12:
        raise ValueError(f"{Path(str(prep_dir)) / SPLIT_FILE}: the trace set's held-out split was decided with "
                         f"fraction {split['fraction']} (by {split.get('decided_by') or 'an earlier run'}); "
                         f"this run asks for {fraction}. Use valid_fraction=null (the recorded split) or the "
                         "recorded fraction: a second split would put held-out traces into a training pack")
    return split


def _record(prep_dir: str | Path, split: dict[str, Any]) -> dict[str, Any]:
    """Write the split unless one is recorded already (then that one wins: one split per set)."""
    from midtrain.locations import as_path, is_url

    path = as_path(prep_dir) / SPLIT_FILE
    if is_url(prep_dir):
        if not path.exists():
            path.write_text(json.dumps(split, indent=1))
        return json.loads(path.read_text())
    tmp = Path(f"{path}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(split, indent=1))
    try:
        os.link(tmp, path)  # fails when another run recorded first
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return json.loads(path.read_text())


def shard_doc_ids(shard_dir: str | Path, split: str = "train") -> set[str]:
    """The document ids in one split of a packed shard dir (its ``<split>/*.docs.txt`` lists)."""
    out: set[str] = set()
    for f in sorted((Path(shard_dir) / split).glob("*.docs.txt")):
        out.update(line for line in f.read_text().splitlines() if line)
    return out
