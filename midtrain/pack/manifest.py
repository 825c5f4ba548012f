"""manifest.json: everything needed to reproduce and audit a packed dataset, merged from the task stats.

Written last (after every pack task), so its presence marks a complete output. Keys the trainer and
`midtrain inspect` rely on: ``seq_length``, ``pad_id``, ``pad_multiple``, ``masks``, ``sources`` (ordered:
``source_ids`` index it), ``splits.<split>.shards``; the rest is the audit trail (tokenizer, config, inputs,
per-source target vs achieved tokens, fill per task, split documents, drops upstream).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from midtrain.formats.run_split import FIX_COMMIT, RunSplit
from midtrain.formats.shard_reader import MANIFEST
from midtrain.formats.shards import HIST_EDGES
from midtrain.locations import as_path, write_text_atomic
from midtrain.pack.pack_step import LOSS_FREE, SPLITS, PackConfig, global_plan

FORMAT = "midtrain-packed/1"


def _add(into: dict, key: str, n: int) -> None:
    into[key] = into.get(key, 0) + n


def _read_task_stats(cfg: PackConfig, out: Path, split: str) -> list[dict]:
    stats = []
    for t in range(cfg.tasks):
        path = out / split / f"{t:05d}.stats.json"
        if not path.exists():
            raise FileNotFoundError(f"{path}: pack task {t} did not finish ({split}); rerun `midtrain pack` to resume")
        stats.append(json.loads(path.read_text()))
    return stats


def _source_entries(plan) -> dict[str, dict]:
    """Per source: the plan's target and availability, and counters the splits fill in."""
    return {
        s: {
            "target_tokens": plan.plans[s].target if s in plan.plans else 0,
            "available_tokens": plan.plans[s].available if s in plan.plans else 0,
            "rate": plan.plans[s].rate if s in plan.plans else 0.0,
            "capped": plan.plans[s].capped if s in plan.plans else False,
            "tokens": 0,
            "valid_tokens": 0,
            "pieces": 0,
            "length_histogram": [0] * (len(HIST_EDGES)),
        }
        for s in plan.sources
    }


def _merge_split(cfg: PackConfig, out: Path, split: str, per_source: dict[str, dict]) -> dict:
    """One split's entry, merged from its task stats; adds the split's tokens to ``per_source``."""
    stats = _read_task_stats(cfg, out, split)
    seqs = sum(s["sequences"] for s in stats)
    toks = sum(s["tokens"] for s in stats)
    by_source: dict[str, int] = {}
    for s in stats:
        for name, n in s["tokens_by_source"].items():
            _add(by_source, name, n)
            per_source[name]["tokens" if split == "train" else "valid_tokens"] += n
        if split == "train":
            for name, n in s["pieces_by_source"].items():
                per_source[name]["pieces"] += n
            for name, h in s["length_histogram_by_source"].items():
                per_source[name]["length_histogram"] = [a + b for a, b in zip(per_source[name]["length_histogram"], h)]
    sp = {
        "shards": [f"{split}/{t:05d}" for t in range(cfg.tasks)],
        "sequences": seqs,
        "tokens": toks,
        "padding_tokens": sum(s["padding_tokens"] for s in stats),
        # Nothing lost: the tokens of the selected documents (copies included) all landed in shards.
        "selected_tokens": sum(s["selected_tokens"] for s in stats),
        "fill": toks / (seqs * cfg.seq_length) if seqs else 0.0,
        "split_documents": sum(s["split_documents"] for s in stats),
        # headers repeated at the start of continuation pieces (counted in tokens, not in the input)
        "repeated_header_tokens": sum(s.get("repeated_header_tokens", 0) for s in stats),
        # pieces of documents with loss spans that hold no target (midtrain.pack.pack_step.LOSS_FREE): not packed
        "loss_free": {
            "reason": LOSS_FREE,
            "pieces": sum((s.get("loss_free") or {}).get("pieces", 0) for s in stats),
            "tokens": sum((s.get("loss_free") or {}).get("tokens", 0) for s in stats),
        },
        "documents": sum(s["documents"] for s in stats),
        "tokens_by_source": dict(sorted(by_source.items())),
        "tasks": [
            {
                "task": s["task"],
                "sequences": s["sequences"],
                "tokens": s["tokens"],
                "fill": s["fill"],
                "min_fill": s["min_fill"],
                "inputs": s["inputs"],
            }
            for s in stats
        ],
    }
    if sp["selected_tokens"] != toks or toks + sp["padding_tokens"] != seqs * cfg.seq_length:
        raise RuntimeError(
            f"{out}: {split} holds {toks} tokens + {sp['padding_tokens']} padding in {seqs} "
            f"sequences of {cfg.seq_length}, but {sp['selected_tokens']} tokens were selected"
        )
    return sp


def _heldout_excluded(cfg: PackConfig, out: Path) -> dict:
    """The held-out trace documents the pack tasks kept out of training (each task counts its own; summed)."""
    total: dict = {"documents": 0, "tokens": 0, "tokens_by_source": {}, "documents_by_source": {}}
    instances: set[str] = set()
    fixes: dict = {"documents": 0, "tokens": 0, "instances": set()}
    for s in _read_task_stats(cfg, out, "train"):
        ex = s.get("heldout_excluded") or {}
        total["documents"] += ex.get("documents", 0)
        total["tokens"] += ex.get("tokens", 0)
        for key in ("tokens_by_source", "documents_by_source"):
            for name, n in (ex.get(key) or {}).items():
                _add(total[key], name, n)
        instances.update(ex.get("instances") or [])  # canonical ids (midtrain.formats.trace_split)
        fc = ex.get(FIX_COMMIT) or {}
        fixes["documents"] += fc.get("documents", 0)
        fixes["tokens"] += fc.get("tokens", 0)
        fixes["instances"].update(fc.get("instances") or [])
        total.update({k: ex[k] for k in ("reason", "rule", "fraction") if k in ex})
    fixes["instances"] = sorted(fixes["instances"])  # held-out instances whose fix commit was left out
    return {**total, "instances": len(instances), "instance_ids": sorted(instances), FIX_COMMIT: fixes}


def _valid_overlap(cfg: PackConfig, out: Path) -> dict | None:
    """The training documents the pack tasks dropped for quoting a validation document (midtrain.pack.valid_overlap;
    each task counts its own; summed), None when the check was off."""
    tasks = [s.get("valid_overlap") for s in _read_task_stats(cfg, out, "train")]
    if not any(tasks):
        return None
    total: dict = {"documents": 0, "tokens": 0, "documents_by_source": {}, "tokens_by_source": {}, "examples": []}
    for t in filter(None, tasks):
        total["documents"] += t["documents"]
        total["tokens"] += t["tokens"]
        for key in ("documents_by_source", "tokens_by_source"):
            for name, n in t[key].items():
                _add(total[key], name, n)
        total["examples"] += t["examples"][: max(0, 20 - len(total["examples"]))]
        # every task indexes the same validation documents
        total.update({k: t[k] for k in ("reason", "ngram_size", "validation_documents")})
    return total


def build_manifest(
    cfg: PackConfig,
    out_dir: str | Path,
    cache_dirs: list[str],
    inputs: list[str],
    tokenizer: dict,
    pad_id: int,
    split: RunSplit,
) -> dict:
    out = as_path(out_dir)
    plan = global_plan(cfg, cache_dirs, split)
    per_source = _source_entries(plan)
    splits = {split: _merge_split(cfg, out, split, per_source) for split in SPLITS}
    overlap = _valid_overlap(cfg, out)
    train = splits["train"]
    natural = not cfg.mixture.weights and not cfg.mixture.tokens
    for name, src in per_source.items():
        # The plan estimated each source's training share before the split; now it is known exactly.
        # (less what quoted a validation document)
        dropped = (overlap or {}).get("tokens_by_source", {}).get(name, 0)
        src["available_tokens"] = plan.tokens_by_source.get(name, 0) - src["valid_tokens"] - dropped
        if natural:  # the natural mixture's target is every training token, once
            src["target_tokens"] = src["available_tokens"]
        src["achieved_fraction_of_target"] = src["tokens"] / src["target_tokens"] if src["target_tokens"] else None
    return {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seq_length": cfg.seq_length,
        "pad_id": pad_id,
        "pad_multiple": cfg.pad_multiple,
        "padding_loss": "excluded",  # padding tokens never carry loss (reader's loss_mask is 0 there)
        "eos_id": plan.eos_id,
        "dtype": plan.dtype,
        "vocab_size": plan.vocab_size,
        "seed": cfg.seed,
        "masks": plan.masks,
        "mask_semantics": "per-token uint8 target mask (1 = token inside loss_spans); "
        "loss at position p uses token p+1",
        "tokenizer": tokenizer,
        "inputs": inputs,
        "tokenized": cache_dirs,
        "config": cfg.to_dict(),
        "mixture": cfg.mixture.name,
        "sequences": train["sequences"],
        "tokens": train["tokens"],
        "padding_tokens": train["padding_tokens"],
        "selected_tokens": train["selected_tokens"],
        "fill": train["fill"],
        "split_documents": train["split_documents"],
        "input_documents": plan.documents,
        "input_tokens": plan.tokens,
        "dropped_upstream": plan.dropped,
        # trace sets' held-out documents (the SFT probe's evaluation set, INPUT/heldout.json): left out of the
        # training split (in the validation split: scored, never trained)
        "heldout_excluded": _heldout_excluded(cfg, out),
        # training documents that quote a validation document (a commit's diff of a validation file): dropped
        "valid_overlap": overlap,
        # the run's split applied (midtrain.formats.run_split): its file (None: decided from these inputs), hash
        "split": split.summary(),
        # per source with repositories: validation by the run's repositories (>= 2 in the run) or by document
        "valid_split": plan.valid_by,
        "length_histogram_edges": HIST_EDGES,
        "sources": per_source,
        "splits": splits,
    }


def write_manifest(manifest: dict, out_dir: str | Path) -> Path:
    path = as_path(out_dir) / MANIFEST
    write_text_atomic(path, json.dumps(manifest, indent=1))
    return path
