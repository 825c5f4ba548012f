"""The SFT probe's held-out tasks: one rule for every trace set, task row and pull request.

A task instance is held out when a fixed hash of its canonical id (midtrain.formats.instance_id:
``owner/name#N`` however a producer spelled it, else the dataset's id normalised) falls below the held-out
fraction: ``sha256("midtrain-heldout:" + id) / 2**256 < fraction`` (:data:`RULE`). No seed, no set, no task
count and no input order enters it, so two trace sets, a task-row table and a PR dump agree on every
instance, and a larger fraction only adds instances (the sets are nested). The SFT probe scores the held-out
instances' traces; every pack (midtraining mixtures, the probe's own training data, every sweep variant)
leaves out every document of a held-out instance: traces, task rows and pull requests alike.

A trace set records the fraction it was split with in PREP_DIR/heldout.json (decided by whoever first needs
it: ``midtrain pack`` of the set, or the probe), with the held-out instances and documents it holds; a run
asking for another fraction is refused (a pack that trained at 0.1 leaked what a probe at 0.2 would score).
A trace document without an instance id is its own instance (its document id is hashed).

A run's split file (midtrain.formats.run_split) applies this rule to every input of the run at once, with
issue <-> pull request links, and wins over a set's record in every pack and probe given it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, overload

from midtrain.formats.documents import document_files, read_jsonl
from midtrain.formats.instance_id import canonical_instance, pull_instance
from midtrain.formats.source_specs import doc_sources_with
from midtrain.locations import as_path, is_url

SPLIT_FILE = "heldout.json"
DEFAULT_FRACTION = 0.1
RULE = "sha256('midtrain-heldout:' + canonical instance id) < fraction"
VERSION = 2
INSTANCE_SOURCES = doc_sources_with(task_instance=True)  # documents that attempt or solve one task instance
_DOC_GLOB = "*.jsonl*"  # the documents folder itself, not below it


def instance_draw(instance: str) -> float:
    """The instance's fixed draw in [0, 1) (the first 8 bytes of its sha256)."""
    h = hashlib.sha256(f"midtrain-heldout:{instance}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64


def instance_heldout(instance: str, fraction: float | None) -> bool:
    return bool(fraction) and instance_draw(instance) < float(fraction)  # type: ignore[arg-type]


def instance_of(doc_id: str) -> str:
    """The canonical task instance a document id names: a trace's ``trace:{instance}:{where}``, a pull
    request's ``pr:{owner/name}#{N}``; the id itself when it names none."""
    s = str(doc_id)
    parts = s.split(":", 2)
    if len(parts) == 3 and parts[0] == "trace" and (inst := canonical_instance(parts[1])):
        return inst
    if parts[0] == "pr" and len(parts) >= 2:
        repo, _, number = s[3:].rpartition("#")
        if number.isdigit() and (inst := pull_instance(repo, int(number))):
            return inst
    return s


def doc_instance(doc: dict) -> str:
    """A document's canonical instance: its metadata ``instance_id`` (canonicalised again: older preps kept
    the producer's spelling), else what its id names."""
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    inst = canonical_instance(meta.get("instance_id"), meta.get("repo"))  # type: ignore[union-attr]
    return inst or instance_of(str(doc.get("id")))


def is_heldout(split: dict[str, Any], doc: dict) -> bool:
    """Whether a document ({id, metadata}) is one of a held-out instance's, under SPLIT's fraction (and a run
    split's issue -> pull request links: an issue is held out with the pull request that resolved it)."""
    inst = doc_instance(doc)
    return instance_heldout((split.get("links") or {}).get(inst, inst), split.get("fraction"))


def decide_split(docs: Iterable[dict], fraction: float, decided_by: str = "") -> dict[str, Any]:
    """The record of a trace set's split: the rule, the fraction, the held-out instances and documents."""
    if not 0 < fraction < 1:
        raise ValueError(f"held-out fraction {fraction} must be in (0, 1)")
    by_doc = {str(d["id"]): doc_instance(d) for d in docs}
    held = {i for i in set(by_doc.values()) if instance_heldout(i, fraction)}
    return {
        "version": VERSION,
        "rule": RULE,
        "fraction": fraction,
        "by": "instance",
        "heldout_groups": sorted(held),
        "groups": len(set(by_doc.values())),
        "documents": len(by_doc),
        "decided_by": decided_by,
        "heldout_ids": sorted(d for d, i in by_doc.items() if i in held),
    }


def read_split(prep_dir: str | Path) -> dict[str, Any] | None:

    path = as_path(prep_dir) / SPLIT_FILE
    return json.loads(path.read_text()) if path.exists() else None


def iter_documents(prep_dir: str | Path, first_only: bool = False) -> Iterator[dict]:
    """The documents ({id, text, metadata}) under PREP_DIR/documents, read as formats.documents reads them;
    unreadable lines and documents without an id are skipped (the reader that uses the documents counts them)."""

    for f in document_files(as_path(prep_dir) / "documents", _DOC_GLOB):
        for _, doc in read_jsonl(f):
            if doc.get("id"):
                yield doc
                if first_only:
                    return


def _source(doc: dict) -> str | None:
    meta = doc.get("metadata")
    return meta.get("source") if isinstance(meta, dict) else None


@overload
def ensure_split(
    prep_dir: str | Path, fraction: float | None = ..., decided_by: str = ..., only_traces: Literal[False] = ...
) -> dict[str, Any]: ...
@overload
def ensure_split(
    prep_dir: str | Path, fraction: float | None = ..., decided_by: str = ..., only_traces: bool = ...
) -> dict[str, Any] | None: ...
def ensure_split(
    prep_dir: str | Path, fraction: float | None = None, decided_by: str = "", only_traces: bool = False
) -> dict[str, Any] | None:
    """The recorded split of a trace set (decided from its documents and recorded when there is none).

    ``fraction``: the caller's held-out share (None = the record's, or DEFAULT_FRACTION when deciding); one that
    differs from the record is refused. ``only_traces``: None, without reading further, for a set whose first
    document is not a trace (a pack input of another source).
    """

    split = read_split(prep_dir)
    if split is not None and split.get("version") != VERSION and split.get("fraction") is not None:
        # a record from before the fixed-hash rule: its fraction stands (a run asking for another is refused
        # below), membership follows the rule now
        old = split
        (as_path(prep_dir) / SPLIT_FILE).unlink(missing_ok=True)
        split = _record(
            prep_dir,
            decide_split(
                (d for d in iter_documents(prep_dir) if _source(d) in (None, "trace")),
                old["fraction"],
                old.get("decided_by") or "",
            ),
        )
    if split is None:
        if only_traces and not any(_source(d) == "trace" for d in iter_documents(prep_dir, first_only=True)):
            return None
        docs = (d for d in iter_documents(prep_dir) if _source(d) in (None, "trace"))
        split = decide_split(docs, DEFAULT_FRACTION if fraction is None else fraction, decided_by)
        split = _record(prep_dir, split)
    if fraction is not None and split["fraction"] is not None and abs(split["fraction"] - fraction) > 1e-12:
        raise ValueError(
            f"{Path(str(prep_dir)) / SPLIT_FILE}: the trace set's held-out split was decided with "
            f"fraction {split['fraction']} (by {split.get('decided_by') or 'an earlier run'}); "
            f"this run asks for {fraction}. Use valid_fraction=null (the recorded split) or the "
            "recorded fraction: a second split would put held-out traces into a training pack"
        )
    return split


def _record(prep_dir: str | Path, split: dict[str, Any]) -> dict[str, Any]:
    """Write the split unless one is recorded already (then that one wins: one split per set)."""

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


def shard_instances(shard_dir: str | Path, split: str = "train") -> dict[str, set[str]]:
    """{canonical instance: document ids} of the documents in one split of a packed shard dir (by their ids)."""
    out: dict[str, set[str]] = {}
    for d in shard_doc_ids(shard_dir, split):
        out.setdefault(instance_of(d), set()).add(d)
    return out


def shard_doc_ids(shard_dir: str | Path, split: str = "train") -> set[str]:
    """The document ids in one split of a packed shard dir (its ``<split>/*.docs.txt`` lists)."""
    out: set[str] = set()
    for f in sorted((Path(shard_dir) / split).glob("*.docs.txt")):
        out.update(line for line in f.read_text().splitlines() if line)
    return out
