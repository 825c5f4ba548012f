"""The probe's fixed data set: trace documents -> chat-template text with assistant-only loss spans -> packed shards.

Trace documents come from `midtrain prep traces` (the trace reader, midtrain.sources.traces, normalises the trajectory
formats and renders them). When a document keeps its normalized ``messages``, the probe renders them again
with the probe tokenizer's chat template (the model's own), using the same renderer; otherwise it reuses the
prep rendering only when the prep recorded that it rendered with the same chat template (``chat_template.sha``)
and refuses the data otherwise, naming both tokenizers (re-prep with ``traces.keep_messages=true`` or with the
probe's tokenizer). Plain-format renderings without messages are dropped (the probe must see the chat template
the model is served with), with a count.

The held-out split is by task instance (midtrain.formats.trace_split: a fixed hash of the canonical instance
id below the fraction, the same for every trace set, task row and pull request; the fraction recorded in
TRACES/heldout.json, one for all the probe's sets), left out of every `midtrain pack`, never redrawn by a seed.
Both splits are packed by `midtrain pack`'s pipeline with the per-token masks from loss_spans. The
finished data directory is stamped with the data hash and the split; a probe with other data settings refuses it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from midtrain.formats.chat_format import CHATML
from midtrain.formats.documents import document_files, read_jsonl, write_jsonl_gz
from midtrain.formats.outputs import OutputRefused
from midtrain.formats.run_split import read as read_run_split
from midtrain.formats.stamp import content_id, digest
from midtrain.formats.tokenizer import load_tokenizer
from midtrain.formats.trace_split import (
    RULE,
    SPLIT_FILE,
    VERSION,
    doc_instance,
    ensure_split,
    is_heldout,
    shard_instances,
)
from midtrain.pack.pack_step import PACK_VERSION, PackConfig
from midtrain.sft.config import SFTConfig
from midtrain.sources.traces import chat_template_sha, render_chat_template

log = logging.getLogger(__name__)

STAMP = "sft_data.json"
# where a ChatML trajectory may be split: an assistant turn or a tool response (never inside the head)
TURN_BOUNDARY = rf"^{re.escape(CHATML.turn_start)}(?:assistant\n|user\n<tool_response>)"


def read_trace_documents(dirs: list[str]) -> tuple[list[dict], Counter]:
    """Documents ({text, id, metadata}) under each DIR/documents; unreadable lines are counted, not fatal."""
    docs: list[dict] = []
    drops: Counter[str] = Counter()
    for d in dirs:
        root = Path(d) / "documents"
        files = document_files(root, "*.jsonl*") if root.is_dir() else []
        if not files:
            raise FileNotFoundError(f"traces: no documents/*.jsonl(.gz) under {d} (run `midtrain prep traces` first)")
        for f in files:
            for i, doc in read_jsonl(f, drops, bad_reason="unreadable_line"):
                if not (isinstance(doc.get("text"), str) and doc.get("id")):
                    drops["unreadable_line"] += 1
                    log.warning("traces: %s:%d is not a document, skipped", f, i)
                    continue
                doc["_set"] = d  # which trace set (and so which recorded split) it belongs to
                docs.append(doc)
    return docs, drops


class TemplateMismatch(ValueError):
    """Trace documents rendered with another chat template than the probe tokenizer's (the message names both)."""


def render(doc: dict, tokenizer: Any, tokenizer_name: str = "(default)") -> tuple[str, list[list[int]]] | str:
    """(text, loss spans) for the probe, or the reason the document cannot be used. A prep rendering made with
    another chat template than TOKENIZER's (or one that did not record its template) raises TemplateMismatch."""

    meta = doc.get("metadata") or {}
    if meta.get("source") not in (None, "trace"):
        return "not_a_trace"
    messages = meta.get("messages")
    if messages:
        out = render_chat_template(messages, tokenizer, meta.get("tools"))
        return out if out is not None else "chat_template_spans_not_found"
    if meta.get("render_format") == "chat_template" and meta.get("loss_spans"):
        recorded = meta.get("chat_template")
        made: dict = recorded if isinstance(recorded, dict) else {}
        if tokenizer is not None and made.get("sha") != chat_template_sha(tokenizer):
            raise TemplateMismatch(
                f"trace {doc.get('id')}: prepared with the chat template of tokenizer "
                f"{made.get('tokenizer') or '(not recorded)'} (template {made.get('sha') or 'unknown'}), but the "
                f"probe's tokenizer {tokenizer_name} has template {chat_template_sha(tokenizer)}; re-prep the traces "
                "with traces.keep_messages=true (the probe renders them again) or with the probe's tokenizer"
            )
        return doc["text"], [list(s) for s in meta["loss_spans"]]
    return "plain_render_without_messages"


def check_spans(text: str, spans: list[list[int]]) -> str | None:
    """Why the spans are unusable (out of range, overlapping, none), or None."""
    if not spans:
        return "no_assistant_turns"
    last = 0
    for a, b in spans:
        if not (0 <= a <= b <= len(text)) or a < last:
            return "bad_loss_spans"
        last = b
    return None


def trace_splits(cfg: SFTConfig) -> dict[str, dict]:
    """Each trace set's held-out split: the run's split file's for every set (``split``), else the set's
    recorded one (decided and recorded here when the set has none yet)."""

    if cfg.split:
        run = read_run_split(cfg.split)
        if cfg.valid_fraction is not None and cfg.valid_fraction != run.heldout_fraction:
            log.info(
                "SFT probe: the run's split %s holds out at %g, over valid_fraction", cfg.split, run.heldout_fraction
            )
        view = {
            "by": "run",
            "fraction": run.heldout_fraction,
            "heldout_groups": sorted(run.heldout_set),
            "links": run.links,
            "file": cfg.split,
            "sha": run.sha,
        }
        return dict.fromkeys(cfg.traces, view)

    splits = {d: ensure_split(d, cfg.valid_fraction, decided_by="sft probe") for d in cfg.traces}
    fractions = {d: s["fraction"] for d, s in splits.items()}
    if len(set(fractions.values())) > 1:  # one rule for all: an instance must be held out in every set or none
        raise ValueError(
            "traces: the trace sets' held-out splits were recorded with different fractions "
            f"({', '.join(f'{d}: {f}' for d, f in fractions.items())}); give the probe sets split at "
            "one fraction (a set's fraction is in its heldout.json)"
        )
    return splits


def select_and_split(docs: list[dict], cfg: SFTConfig, splits: dict[str, dict]) -> tuple[list[dict], list[dict]]:
    """(training, held-out) documents: held out as their set's recorded split says; max_traces caps the
    training side (a fixed subset, by id order). Deterministic, and no seed moves a document across."""

    docs = sorted(docs, key=lambda d: d["id"])
    held = [is_heldout(splits[d["_set"]], d) for d in docs]
    train = [d for d, h in zip(docs, held) if not h]
    if cfg.max_traces is not None:
        train = train[: cfg.max_traces]
    return train, [d for d, h in zip(docs, held) if h]


def split_summary(splits: dict[str, dict], valid_docs: list[dict]) -> dict[str, Any]:
    """What the report says about the held-out set: how it was split, its instances and documents."""

    return {
        "by": sorted({s["by"] for s in splits.values()}),
        "rule": RULE,
        "fraction": sorted({s["fraction"] for s in splits.values()}),
        "recorded": list(dict.fromkeys(s.get("file") or str(Path(d) / "heldout.json") for d, s in splits.items())),
        "run_split": next((s["file"] for s in splits.values() if s.get("file")), None),
        "instances": len({doc_instance(d) for d in valid_docs}),
        "instance_ids": sorted({doc_instance(d) for d in valid_docs}),
        "documents": len(valid_docs),
        "split_sha": split_sha(splits),
    }


def split_sha(splits: dict[str, dict]) -> str:
    # a run split's links only when it has some: a probe of the same sets keeps its data's identity
    raw = json.dumps(
        [
            [s["by"], s["fraction"], s["heldout_groups"], *([s["links"]] if s.get("links") else [])]
            for _, s in sorted(splits.items())
        ]
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


def input_content(cfg: SFTConfig) -> dict[str, Any]:
    """What the probe's traces and tokenizer hold, not only their paths: traces prepared again in place (other
    documents) or another tokenizer file under the same name make other probe data and another probe."""
    docs = [Path(t) / "documents" if (Path(t) / "documents").is_dir() else Path(t) for t in cfg.traces]
    tok = cfg.tokenizer
    return {
        "data_content": [content_id(d) for d in docs],
        "tokenizer_content": content_id(tok) if tok and Path(tok).exists() else None,
    }


def data_key(cfg: SFTConfig, splits: dict[str, dict], content: dict[str, Any]) -> str:
    """The identity of the probe's data dir: its settings, the held-out split and the content of its inputs
    (CONTENT, :func:`input_content`): a trace edited at the same path is other data, never "reusing"."""
    return f"{cfg.data_hash()}-{split_sha(splits)}-{digest({**content, 'pack': PACK_VERSION})[:8]}"


def _mark_split(docs_dir: Path, role: str) -> None:
    """The probe's own packs are of documents already split: record that no document in them is held out, so
    `midtrain pack` does not split them again."""

    (docs_dir / SPLIT_FILE).write_text(
        json.dumps(
            {
                "version": VERSION,
                "fraction": None,
                "by": "instance",
                "heldout_groups": [],
                "decided_by": f"sft probe ({role})",
            }
        )
    )


def _leaked(train_shards: Path, splits: dict[str, dict], valid_docs: list[dict]) -> set[str]:
    """The held-out instances in the probe's training shards, by instance and a run split's issue links."""

    links = next(iter(splits.values())).get("links") or {}
    held = {links.get(i, i) for i in (doc_instance(d) for d in valid_docs)}
    return {i for i in shard_instances(train_shards) if links.get(i, i) in held}


def _write_docs(docs: list[dict], prep_dir: Path) -> None:
    out = prep_dir / "documents"
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl_gz(out / "00000.jsonl.gz", ({k: v for k, v in d.items() if k != "_set"} for d in docs))


def _set_aside(data_dir: Path, key: str) -> None:
    """Move a data dir built with other settings out of the way (a rename: a concurrent probe that already
    replaced it with this key's data keeps its dir), then delete it."""
    aside = data_dir.with_name(f"{data_dir.name}.stale-{os.getpid()}")
    try:
        if json.loads((data_dir / STAMP).read_text()).get("data_hash") == key:
            return
        data_dir.rename(aside)
    except (OSError, ValueError):
        return  # another probe moved or replaced it first
    log.warning("SFT data: %s held data built with other settings; rebuilt", data_dir)
    shutil.rmtree(aside, ignore_errors=True)


def _reusable(data_dir: Path, key: str, overwrite: bool) -> dict[str, Any] | None:
    """The stamp of DATA_DIR when it was built for KEY; None when there is none (or, overwriting, another)."""
    stamp_path = data_dir / STAMP
    if stamp_path.exists() and overwrite:
        _set_aside(data_dir, key)
    if not stamp_path.exists():
        return None
    stamp = json.loads(stamp_path.read_text())
    if stamp.get("data_hash") != key:
        raise OutputRefused(
            f"data_dir: {data_dir} holds probe data built with other settings or input content "
            f"(data hash {stamp.get('data_hash')}, this probe {key}); use another data_dir "
            "or --overwrite"
        )
    log.info("SFT data: reusing %s (%d train / %d held-out traces)", data_dir, stamp["train_docs"], stamp["valid_docs"])
    return stamp


def prepare_data(cfg: SFTConfig, data_dir: str | Path, overwrite: bool = False) -> dict[str, Any]:
    """Build (or reuse) the probe's data under DATA_DIR; returns the stamp (paths, counts, hashes).

    Data built with other settings are refused, or with ``overwrite`` rebuilt."""
    # lazy: loads torch only when this runs
    from midtrain.pack.pipeline import pack

    data_dir = Path(data_dir)
    splits = trace_splits(cfg)
    key = data_key(cfg, splits, input_content(cfg))
    stamp = _reusable(data_dir, key, overwrite)
    if stamp is not None:
        return stamp

    tok = load_tokenizer(cfg.tokenizer, shared=True)  # read only: rendering
    raw, drops = read_trace_documents(cfg.traces)
    usable = []
    for doc in raw:
        out = render(doc, tok, cfg.tokenizer or "(default)")
        reason = out if isinstance(out, str) else check_spans(*out)
        if reason:
            drops[reason] += 1
            log.warning("SFT data: trace %s dropped (%s)", doc["id"], reason)
            continue
        assert not isinstance(out, str)  # a str is a drop reason, counted above
        text, spans = out
        meta = dict(doc.get("metadata") or {}, loss_spans=spans, source="trace")
        meta.pop("messages", None)
        meta.pop("tools", None)
        usable.append({"text": text, "id": doc["id"], "metadata": meta, "_set": doc["_set"]})
    train_docs, valid_docs = select_and_split(usable, cfg, splits)
    if not train_docs:
        raise ValueError(f"traces: no usable trace documents in {cfg.traces} (dropped: {dict(drops)})")

    # Build next to the target and rename into place: concurrent probes (a Slurm protocol) never see half a dir.
    tmp = data_dir.with_name(f"{data_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    # An over-long trajectory is split at turn starts (an assistant turn, or a tool response), and each later
    # piece repeats the trajectory's head (system prompt, tools, task: the text before its first assistant
    # turn), loss-free as in the whole trajectory, as repository pieces repeat their header.
    pcfg = PackConfig(
        seq_length=cfg.train.data.seq_length,
        pad_multiple=cfg.pad_multiple,
        seed=cfg.train.data.seed,
        valid_fraction=0.0,
        heldout_fraction=0.0,
        tokenizer=cfg.tokenizer,
        tokenize_tasks=1,
        tasks=1,
        boundaries={"trace": TURN_BOUNDARY},
        repeat_header=["trace"],
    )
    manifests: dict[str, dict] = {}
    for split, docs in (("train", train_docs), ("valid", valid_docs)):
        if not docs:
            continue
        _write_docs(docs, tmp / f"{split}_docs")
        _mark_split(tmp / f"{split}_docs", split)
        packed = pack(pcfg, [tmp / f"{split}_docs"], tmp / f"{split}_shards").manifest
        assert packed is not None  # a local pack (no dry run, no Slurm) returns its manifest
        manifests[split] = packed
    heldout = split_summary(splits, valid_docs)
    # by instance, not document id: another attempt (or spelling) of a held-out task is a leak too
    leaked = _leaked(tmp / "train_shards", splits, valid_docs)
    if leaked:  # the split above makes this impossible; the shards are checked, not trusted
        raise RuntimeError(f"SFT data: held-out instances in the probe's training shards: {sorted(leaked)[:5]}")
    heldout["in_probe_training"] = len(leaked)  # instances
    stamp = {
        "data_hash": key,
        "train_docs": len(train_docs),
        "valid_docs": len(valid_docs),
        "heldout": heldout,
        "train_ids": [d["id"] for d in train_docs],
        "valid_ids": [d["id"] for d in valid_docs],
        "dropped": dict(drops),
        "read": len(raw),
        "train_shards": str(data_dir / "train_shards"),
        "valid_shards": str(data_dir / "valid_shards") if valid_docs else None,
        "train_sequences": (manifests["train"].get("splits") or {}).get("train", {}).get("sequences"),
        "masks": bool(manifests["train"].get("masks")),
    }
    (tmp / STAMP).write_text(json.dumps(stamp, indent=2))
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(data_dir)
    except OSError:
        if not (data_dir / STAMP).exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another probe finished the same data first
        return prepare_data(cfg, data_dir)
    log.info(
        "SFT data: %d train / %d held-out traces (dropped %s) -> %s",
        len(train_docs),
        len(valid_docs),
        dict(drops) or "none",
        data_dir,
    )
    return stamp
