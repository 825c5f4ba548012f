"""One held-out decision per run: which task instances, which repositories, which fix commits no training sees.

Decided once from all of the run's pack inputs (prep directories) before any pack reads them, recorded in one
file beside the run (:data:`SPLIT_FILE`: the demo's WORKDIR/split.json, a sweep's OUTPUT/split.json, the
real-model experiment's WORKDIR/split.json) and applied by every pack of the run (``midtrain pack
split=FILE``, whatever the pack's own fractions) and by the SFT probe (``midtrain sft split=FILE``):

- **held-out instances**: a task instance (canonical id, midtrain.formats.instance_id) is held out when the
  fixed draw of its *group* falls below ``heldout_fraction`` (midtrain.formats.trace_split's rule, so a split
  file and a trace set's heldout.json agree). An issue and the pull request that resolved it (a pull request's
  ``linked_instances``, from its record) are one group, named by the pull request: a trace of the issue and the
  task row of its PR are held out together. Every trace, task row and pull request of a held-out instance goes
  to validation; no pack trains on it.
- **validation repositories**: one set for every source (repos, commits, pull requests, build logs, traces),
  drawn over all the run's repositories (a fixed hash of the canonical owner/name below ``valid_fraction``; at
  least one, never all) when the run spans two or more. A document of one validates in every pack.
- **fix commits**: the commits documents holding a held-out instance's fix (one of its pull request's commits
  by sha, or a commit whose change has the key of its patch, midtrain.formats.patch_key) are left out of every
  pack, counted ``heldout/fix_commit``.

The record holds the fractions, the held-out instances, the links, the validation repositories, the fix
commits and a hash of all of them (``sha``: a pack's manifest and the probe's stamp name it). A document the
decision did not see (an input prepped again for a sweep variant) is judged by the same rules and links.

:func:`training_leaks` is the check by canonical id the `midtrain inspect` command and the probe's self-check run
over training shards; a check by content would sit beside it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from midtrain.formats.instance_id import canonical_instance, normalize_repo
from midtrain.formats.patch_key import commit_keys
from midtrain.formats.trace_split import (
    INSTANCE_SOURCES,
    RULE,
    doc_instance,
    instance_heldout,
    instance_of,
    iter_documents,
    shard_doc_ids,
)

log = logging.getLogger(__name__)

SPLIT_FILE = "split.json"
VERSION = 1
FIX_COMMIT = "heldout/fix_commit"  # the drop reason of a held-out instance's fix commit


def repo_draw(repo: str) -> float:
    """A repository's validation draw: fixed (no seed), so the validation repositories stay put."""
    h = hashlib.blake2b(f"0:valid:repository:{repo}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64


def _meta(doc: dict) -> dict:
    m = doc.get("metadata")
    return m if isinstance(m, dict) else {}


def doc_repo(doc: dict) -> str | None:
    """A document's canonical repository: its metadata ``repo``, else the one its instance names."""
    meta = _meta(doc)
    if r := normalize_repo(meta.get("repo")):
        return r
    inst = doc_instance(doc) if meta.get("source") in INSTANCE_SOURCES else ""
    return normalize_repo(inst.rpartition("#")[0]) if "#" in inst else None


def validation_repositories(by_source: dict[str, set[str]], fraction: float) -> list[str]:
    """The validation repositories of a run whose sources span BY_SOURCE's repositories: those drawing below
    FRACTION, else the first to draw that can; a repository is taken only while every source that has it keeps
    a training repository (a source of one repository, this repository's commits in the demo, splits by
    document); none for a run of fewer than two."""
    rs = sorted(set().union(*by_source.values()), key=repo_draw)
    if len(rs) < 2 or fraction <= 0:
        return []
    chosen: set[str] = set()

    def fits(r: str) -> bool:
        return all(s - chosen - {r} for s in by_source.values() if r in s)

    for r in rs:
        if repo_draw(r) < fraction and fits(r):
            chosen.add(r)
    if not chosen:
        chosen = next(({r} for r in rs if fits(r)), set())
    return sorted(chosen)


def decide(
    inputs: Sequence[str | Path], heldout_fraction: float, valid_fraction: float, decided_by: str = ""
) -> dict[str, Any]:
    """The run's split from every document of its INPUTS (see the module doc)."""
    if not 0 <= heldout_fraction < 1 or not 0 <= valid_fraction < 1:
        raise ValueError(f"split: fractions must be in [0, 1), got held-out {heldout_fraction}, valid {valid_fraction}")
    instances: set[str] = set()
    links: dict[str, str] = {}  # issue -> the pull request that resolved it
    named: dict[str, str] = {}  # document id -> instance, where the id does not name it
    repos: dict[str, set[str]] = {}  # source -> its repositories
    fixes: dict[str, tuple[set[str], set[str]]] = {}  # instance -> (shas, patch keys)
    commits: list[dict[str, Any]] = []
    for i in inputs:
        for d in iter_documents(i):
            meta = _meta(d)
            if r := doc_repo(d):
                repos.setdefault(str(meta.get("source")), set()).add(r)
            if meta.get("source") == "commit":
                commits.append({"id": str(d["id"]), "commits": meta.get("commits") or [], "text": d.get("text", "")})
                continue
            if meta.get("source") not in INSTANCE_SOURCES:
                continue
            inst = doc_instance(d)
            instances.add(inst)
            if instance_of(str(d["id"])) != inst:
                named[str(d["id"])] = inst
            for issue in meta.get("linked_instances") or []:
                if (c := canonical_instance(issue)) and c != inst:
                    links[c] = min(links.get(c, inst), inst)  # an issue two PRs claim: the first by id
            shas, keys = fixes.setdefault(inst, (set(), set()))
            shas.update(str(s).lower()[:12] for s in meta.get("fix_commits") or [])
            if meta.get("patch_key"):
                keys.add(str(meta["patch_key"]))
    instances |= set(links)
    group = {i: links.get(i, i) for i in instances}
    held = sorted(i for i, g in group.items() if instance_heldout(g, heldout_fraction))
    held_shas = {s: i for i in held for s in fixes.get(i, ((), ()))[0]}
    held_keys = {k: i for i in held for k in fixes.get(i, ((), ()))[1]}
    fix_docs: dict[str, str] = {}  # the commits documents holding one, by id
    for cd in commits:
        hit = next((held_shas[s[:12].lower()] for s in cd["commits"] if s[:12].lower() in held_shas), None)
        if hit is None and held_keys:
            hit = next((held_keys[k] for k in commit_keys(cd["text"]) if k in held_keys), None)
        if hit is not None:
            fix_docs[cd["id"]] = hit
    record: dict[str, Any] = {
        "version": VERSION,
        "rule": RULE,
        "heldout_fraction": heldout_fraction,
        "valid_fraction": valid_fraction,
        "heldout_instances": held,
        "links": dict(sorted(links.items())),
        "document_instances": dict(sorted(named.items())),
        "repositories": len(set().union(*repos.values())),
        "validation_repositories": validation_repositories(repos, valid_fraction),
        "fix_commits": dict(sorted(fix_docs.items())),
        # what a commits prep given the file leaves out (commits.split): the held-out fixes' shas and keys
        "fix_changes": {"shas": dict(sorted(held_shas.items())), "keys": dict(sorted(held_keys.items()))},
        "instances": len(instances),
    }
    record["sha"] = split_hash(record)
    record["inputs"] = [str(i) for i in inputs]
    record["decided_by"] = decided_by
    return record


def split_hash(record: dict[str, Any]) -> str:
    keys = ["rule", "heldout_fraction", "valid_fraction", "heldout_instances", "links", "validation_repositories"]
    keys += ["fix_commits", "fix_changes"]
    raw = json.dumps([record.get(k) for k in keys], sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def write(record: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)
    return path


def read(path: str | Path) -> RunSplit:
    """The run's split recorded at PATH; a missing or foreign file is refused, naming it."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"split: {p} does not exist (decide it first: the run's split file)")
    try:
        record = json.loads(p.read_text())
    except ValueError as e:
        raise ValueError(f"split: {p} is not JSON ({e})") from None
    if not isinstance(record, dict) or record.get("version") != VERSION or "heldout_instances" not in record:
        raise ValueError(f"split: {p} is not a run split file (version {VERSION}, heldout_instances)")
    if record.get("sha") != split_hash(record):
        raise ValueError(f"split: {p}: its sha does not match its content (edited by hand?)")
    return RunSplit(record, str(p))


def decide_once(
    path: str | Path, inputs: Sequence[str | Path], heldout_fraction: float, valid_fraction: float, decided_by: str
) -> RunSplit:
    """The split at PATH, decided from INPUTS and written there when there is none or it was decided from other
    inputs or fractions (a rerun with the same ones keeps it)."""
    p = Path(path)
    want = decide(inputs, heldout_fraction, valid_fraction, decided_by)
    if p.is_file():
        old = json.loads(p.read_text())
        if old.get("sha") == want["sha"]:
            return RunSplit(old, str(p))
        log.info("split: %s was decided from other inputs or fractions; decided again", p)
    write(want, p)
    return RunSplit(want, str(p))


class RunSplit:
    """A run's split, applied: membership by its recorded decisions, and its rules for what it did not see."""

    def __init__(self, record: dict[str, Any], path: str | None = None) -> None:
        self.record = record
        self.path = path
        self.heldout_fraction = float(record["heldout_fraction"])
        self.valid_fraction = float(record["valid_fraction"])
        self.links: dict[str, str] = dict(record.get("links") or {})
        self.named: dict[str, str] = dict(record.get("document_instances") or {})
        self.heldout_set = set(record["heldout_instances"])
        self.validation = set(record.get("validation_repositories") or [])
        self.fix_docs: dict[str, str] = dict(record.get("fix_commits") or {})
        changes = record.get("fix_changes") or {}
        self.fix_shas: dict[str, str] = dict(changes.get("shas") or {})
        self.fix_keys: dict[str, str] = dict(changes.get("keys") or {})
        self.sha = str(record.get("sha"))

    def group(self, instance: str) -> str:
        return self.links.get(instance, instance)

    def heldout(self, instance: str) -> bool:
        return instance in self.heldout_set or instance_heldout(self.group(instance), self.heldout_fraction)

    def instance_of_id(self, doc_id: str) -> str:
        return self.named.get(doc_id) or instance_of(doc_id)

    def heldout_doc(self, doc_id: str, source: str | None, instance: str | None = None) -> str | None:
        """The held-out instance a document (its id, source, instance when known) belongs to, or None."""
        if source not in INSTANCE_SOURCES:
            return None
        inst = instance or self.instance_of_id(doc_id)
        return inst if self.heldout(inst) else None

    def validation_repo(self, repo: str | None) -> bool:
        """Whether REPO's documents validate in every source (a repository the decision did not see trains)."""
        return repo is not None and repo in self.validation

    def fix_commit(self, doc_id: str) -> str | None:
        """The held-out instance whose fix commit DOC_ID (a commits document) holds, or None."""
        return self.fix_docs.get(doc_id)

    def fix_change(self, sha: str, text: str) -> str | None:
        """The held-out instance whose fix one commit (its sha, its rendering ``commit <sha12>`` + diff) is."""
        if inst := self.fix_shas.get(sha[:12].lower()):
            return inst
        return next((self.fix_keys[k] for k in commit_keys(text) if k in self.fix_keys), None)

    def summary(self) -> dict[str, Any]:
        """What a pack's manifest and the probe's stamp say about the split they applied."""
        return {
            "file": self.path,
            "sha": self.sha,
            "heldout_fraction": self.heldout_fraction,
            "valid_fraction": self.valid_fraction,
            "heldout_instances": len(self.heldout_set),
            "validation_repositories": sorted(self.validation),
            "fix_commits": len(self.fix_docs),
        }


def training_leaks(split: RunSplit, shard_dir: str | Path, split_name: str = "train") -> dict[str, list[str]]:
    """{held-out instance: its document ids} among the documents of SHARD_DIR's SPLIT_NAME (their ids, read by
    canonical id and the split's links): any spelling or attempt of a held-out task, and held-out fix commits.
    A check by content (a held-out patch's or trajectory's text under another id) belongs beside this one."""
    out: dict[str, list[str]] = {}
    for d in sorted(shard_doc_ids(shard_dir, split_name)):
        inst = split.fix_commit(d)
        if inst is None:
            source = "trace" if d.startswith("trace:") else "pr" if d.startswith("pr:") else None
            inst = split.heldout_doc(d, source)
        if inst is not None:
            out.setdefault(inst, []).append(d)
    return out
