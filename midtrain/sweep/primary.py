"""The sweep's pre-registered primary comparison and its zero-LR null arm, read from the runs' probe results.

Primary: the variants of ``SweepConfig.primary`` are one arm's midtraining seeds; each probe seed (``sft``,
``sft-s<SEED>``) and each held-out trajectory (the probe's ``heldout_per_document``) is shared with the
baseline. The interval is the nested bootstrap over all three levels; beside it, Student's t over the
midtraining seeds (the independent units: M - 1 degrees of freedom) on each seed's mean paired difference.

Null arm: one step at LR 0 through the trainer must give the baseline's probe results bit for bit (every probe
seed, every held-out trajectory); otherwise something besides midtraining differs between the arms, and the
report fails (:class:`NullArmMismatch`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from midtrain.curate.leak_scan import describe, scan_shards, split_index
from midtrain.eval.noise import NO_BAND, hierarchical_bootstrap, paired
from midtrain.eval.results import CheckpointResults
from midtrain.sweep_config import SweepConfig


class NullArmMismatch(RuntimeError):
    """The zero-LR null arm's probe results differ from the baseline's."""


def per_seed_documents(r: CheckpointResults) -> dict[str, dict[str, float]]:
    """{probe seed dir: {held-out document: loss}} (the overall held-out loss as one document for a probe
    result from before per-document losses)."""
    out: dict[str, dict[str, float]] = {}
    for run in r.sft_runs:
        docs = run.get("heldout_per_document")
        if not docs and isinstance(run.get("heldout_loss"), (int, float)):
            docs = {"(all)": float(run["heldout_loss"])}
        if docs:
            out[str(run.get("seed_dir") or "sft")] = {str(k): float(v) for k, v in docs.items()}
    return out


def primary_comparison(cfg: SweepConfig, results: list[CheckpointResults]) -> dict[str, Any] | None:
    """arm - baseline on the probe's held-out loss (mean over trajectories), or None without a primary."""
    if not cfg.primary:
        return None
    by = {r.name: per_seed_documents(r) for r in results}
    base = by.get(cfg.baseline) or {}
    arms = {n: by.get(n) or {} for n in cfg.primary}
    have = {n: a for n, a in arms.items() if a}
    probes = sorted(set(base).intersection(*have.values())) if have else []
    docs = sorted(set.intersection(*[set(x[p]) for x in [base, *have.values()] for p in probes])) if probes else []
    out: dict[str, Any] = {
        "arm": list(cfg.primary),
        "about": cfg.primary_about,
        "baseline": cfg.baseline,
        "metric": "SFT probe held-out loss, mean over held-out trajectories (lower is better)",
        "midtraining_seeds": len(have),
        "probe_seeds": probes,
        "documents": docs,
        "missing": sorted(set(arms) - set(have)),
    }
    if not docs:
        return {**out, "status": "no shared probe seeds and held-out documents yet"}
    b = np.array([[base[p][d] for d in docs] for p in probes])
    a = np.array([[[arm[p][d] for d in docs] for p in probes] for arm in have.values()])
    boot = hierarchical_bootstrap(b, a)
    per_seed = {n: float(a[m].mean() - b.mean()) for m, n in enumerate(have)}
    t = paired(dict.fromkeys(per_seed, 0.0), per_seed)
    return {
        **out,
        "status": "ok",
        "bootstrap": boot.to_dict(),
        "t_over_midtraining_seeds": t.to_dict(),
        "per_seed": per_seed,
    }


def primary_markdown(p: dict[str, Any] | None) -> list[str]:
    if p is None:
        return []
    md = ["## Primary comparison (pre-registered)", ""]
    if p["about"]:
        md += [f"Hypothesis: {p['about']}", ""]
    md.append(
        f"**{' + '.join(p['arm'])}** (one arm, {p['midtraining_seeds']} midtraining seeds) minus **{p['baseline']}** "
        f"on the {p['metric']}, paired over probe seeds {p['probe_seeds'] or '—'} and {len(p['documents'])} "
        "held-out trajectories."
    )
    if p["status"] != "ok":
        return [*md, "", f"Not computed: {p['status']}.", ""]
    boot, t = p["bootstrap"], p["t_over_midtraining_seeds"]

    def interval(c: dict[str, Any]) -> str:
        return NO_BAND if c["low"] is None else f"[{c['low']:+.4f}, {c['high']:+.4f}]"

    verdict = (
        "no verdict (one sample on every level)"
        if boot["difference"] is None
        else ("midtraining is better than the baseline beyond the interval" if boot["high"] < 0 else "")
        or ("midtraining is worse than the baseline beyond the interval" if boot["low"] > 0 else "")
        or "no difference beyond the interval: the interval holds 0"
    )
    md += [
        "",
        f"- Δ = {boot['delta']:+.4f}; 95% bootstrap interval {interval(boot)} (midtraining seeds, probe seeds and "
        "held-out trajectories resampled, nested)",
        f"- Student t over the midtraining seeds (df {t['df'] if t['df'] is not None else '—'}): {interval(t)}",
        "- per midtraining seed: " + ", ".join(f"{n} {v:+.4f}" for n, v in p["per_seed"].items()),
        f"- **{verdict}**",
        "",
    ]
    if p["missing"]:
        md += [f"Missing arm seeds (not counted): {', '.join(p['missing'])}.", ""]
    return md


def null_check(cfg: SweepConfig, results: list[CheckpointResults]) -> dict[str, Any] | None:
    """Whether the null arm's probe results equal the baseline's exactly (None without a null arm)."""
    if not cfg.null_arm:
        return None
    by = {r.name: per_seed_documents(r) for r in results}
    base, null = by.get(cfg.baseline) or {}, by.get(cfg.null_arm) or {}
    diffs = [
        f"{p}/{d}: {base[p].get(d)!r} vs {null.get(p, {}).get(d)!r}"
        for p in sorted(set(base) | set(null))
        for d in sorted(set(base.get(p, {})) | set(null.get(p, {})))
        if base.get(p, {}).get(d) != null.get(p, {}).get(d)
    ]
    return {"null_arm": cfg.null_arm, "probe_seeds": sorted(null), "equal": bool(base) and not diffs, "diffs": diffs}


def null_markdown(n: dict[str, Any] | None) -> list[str]:
    if n is None:
        return []
    if n["equal"]:
        return [
            f"Null arm: **{n['null_arm']}** (one step at LR 0 through the trainer) gives the baseline's probe results "
            f"exactly on every probe seed ({', '.join(n['probe_seeds'])}) and held-out trajectory.",
            "",
        ]
    return [
        f"**NULL ARM FAILED**: {n['null_arm']} (LR 0) does not give the baseline's probe results: "
        + ("; ".join(n["diffs"][:6]) or "no results")
        + ". The arms differ by more than midtraining; no comparison here stands.",
        "",
    ]


def proxy_content_scan(reference: Path, shard_dirs: dict[str, Path], tokenizer: Any) -> list[dict[str, Any]]:
    """The proxy's held-out documents (REFERENCE's validation split) in each variant's training shards, by content:
    each distinct pack once (variants a seed apart pack the same shards: the manifest's run_key)."""
    if not (reference / "manifest.json").is_file():
        return []
    index = split_index(reference, "valid", tokenizer)
    seen: dict[str, dict[str, Any]] = {}
    out = []
    for name, d in shard_dirs.items():
        if not (d / "manifest.json").is_file():
            continue
        key = json.loads((d / "manifest.json").read_text()).get("run_key") or str(d)
        if key not in seen:
            seen[key] = scan_shards(d, index, tokenizer)
        out.append({**seen[key], "variant": name})
    return out


def proxy_scan_markdown(scans: list[dict[str, Any]]) -> list[str]:
    if not scans:
        return []
    return [
        "## The proxy's held-out documents in training, by content",
        "",
        "The reference pack's validation split (what the proxy scores: its code and commits, whose every token "
        "is scored), its word 13-grams looked up in each variant's training sequences (midtrain.curate.leak_scan). "
        "A pack with `valid_decontam_ngrams` drops the training documents that quote one; what is found here is "
        "what training still holds:",
        "",
        *[f"- {s['variant']}: {describe(s)}" for s in scans],
        "",
    ]
