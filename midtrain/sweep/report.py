"""The sweep report: variants ranked on the probe metric, against the no-midtraining baseline and each other.

Writes OUTPUT/report/sweep.md (ranking, pairwise deltas with the seed-noise rule) and sweep.json beside the
side-by-side protocol report (report.md, figures) of the same runs. Every number is read from the runs'
result files; a variant without results is listed as missing, never ranked.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from midtrain.eval.noise import RULE, spread
from midtrain.eval.rank import markdown as rank_markdown
from midtrain.eval.rank import proxy_agreements
from midtrain.eval.report import Row, build_rows, comparison, delta_mark, write_report
from midtrain.eval.results import load_checkpoint_results, read_metrics
from midtrain.protocol import report_steps
from midtrain.sweep.plan import output_dir, reference_shards, sweep_protocol, variant_plan
from midtrain.sweep.primary import (
    NullArmMismatch,
    null_check,
    null_markdown,
    primary_comparison,
    primary_markdown,
    proxy_content_scan,
    proxy_scan_markdown,
)
from midtrain.sweep_config import SweepConfig

log = logging.getLogger(__name__)


def _row(rows: list[Row], key: str) -> Row | None:
    return next((r for r in rows if f"{r.group}/{r.metric}" == key), None)


def _fmt(row: Row | None, name: str) -> str:
    if row is None or row.values.get(name) is None:
        return "—"
    s = row.samples.get(name) or []
    text = row.fmt.format(row.values[name])
    return text + (f" ± {row.fmt.format(spread(s).sd).rstrip('%')}" if len(s) > 1 else "")


def _delta(row: Row, name: str, ref: str) -> str:
    v, b = row.values.get(name), row.values.get(ref)
    if v is None or b is None:
        return "—"
    return f"{row.delta_fmt.format(v - b)}{delta_mark(row, name, ref)}"


def steps_done(run_dir: Path) -> int | None:
    """The last step the variant's midtraining run logged (None before it has logged one)."""
    rows = read_metrics(run_dir / "metrics.jsonl")
    return max((int(r["step"]) for r in rows), default=None)


def write_sweep_report(cfg: SweepConfig) -> Path:
    proto = sweep_protocol(cfg)
    assert proto.report_dir is not None  # sweep_protocol sets it
    out = Path(proto.report_dir)
    names = list(proto.checkpoints)
    runs = {n: str(output_dir(cfg) / n) for n in names}
    read = report_steps(proto)  # the seeds and evals the protocol runs; each column only its own checkpoint's
    write_report(runs, out, cfg.baseline, f"{cfg.name}: side by side", proto.notes, proto.checkpoints, read)
    results = [load_checkpoint_results(n, p, proto.checkpoints.get(n), read) for n, p in runs.items()]
    rows = build_rows(results)
    key = _row(rows, cfg.rank_by)
    ranked: list[str] = []
    if key is None:
        log.warning("sweep report: no results for %s yet", cfg.rank_by)
    else:
        scores = {n: v for n in cfg.variants if (v := key.values.get(n)) is not None}
        ranked = sorted(scores, key=lambda n: scores[n], reverse=key.higher_is_better)
    missing = [n for n in names if not key or key.values.get(n) is None]
    held = _row(rows, "Proxy: held-out loss (before SFT)/all sources")
    retr = _row(rows, "Proxy: code retrieval (before SFT)/accuracy, mean over depth x length")
    base = cfg.baseline
    md = [
        f"# Sweep {cfg.name}",
        "",
        f"Every variant midtrained from `{proto.checkpoints[base]}` with the same seed ({cfg.seed}) and budget "
        f"({cfg.tokens:,} tokens) unless the variant names its own; then the identical SFT probe "
        f"(`{proto.sft_recipe}`, seeds {proto.probe_seeds or 'the recipe’s'}) and the proxy evals. "
        f"Ranked on **{cfg.rank_by}** ({'higher' if key and key.higher_is_better else 'lower'} is better); "
        f"**{base}** is the start checkpoint through the same probe, without midtraining.",
        "",
        f"Seed noise: {RULE}. ▲ better, ▼ worse than the reference.",
        "",
    ]
    head = [
        "rank",
        "variant",
        "what changes",
        "tokens trained",
        cfg.rank_by.split("/")[-1],
        f"Δ vs {base}",
        "Δ vs best",
        "proxy held-out loss",
        "retrieval accuracy",
    ]
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ranking: list[dict[str, Any]] = []
    best = ranked[0] if ranked else None
    for i, name in enumerate(ranked, 1):
        assert key is not None and best is not None  # ranked is empty without a key row
        plan = variant_plan(cfg, name)
        steps = steps_done(plan.run_dir)
        # sequence tokens (padding included) the run went through: steps x global batch x context length
        tokens = steps * plan.batch * plan.pack.seq_length if steps else None
        md.append(
            "| "
            + " | ".join(
                [
                    str(i),
                    name,
                    cfg.variants[name].about or "",
                    f"{tokens:,}" if tokens else "—",
                    _fmt(key, name),
                    _delta(key, name, base),
                    "—" if name == best else _delta(key, name, best),
                    _fmt(held, name),
                    _fmt(retr, name),
                ]
            )
            + " |"
        )
        value, base_value = scores[name], key.values.get(base)
        ranking.append(
            {
                "rank": i,
                "variant": name,
                "value": value,
                "samples": key.samples.get(name),
                "delta_vs_baseline": None if base_value is None else value - base_value,
                "vs_baseline": c.to_dict() if (c := comparison(key, name, base)) else None,
                "tokens_trained": tokens,
                "steps": steps,
                "seq_length": plan.pack.seq_length,
            }
        )
    if key is not None and key.values.get(base) is not None:
        md.append(
            "| — | "
            + " | ".join([base, "no midtraining", "0", _fmt(key, base), "", "", _fmt(held, base), _fmt(retr, base)])
            + " |"
        )
    md.append("")
    if key is not None and len(ranked) > 1:
        cols = [*ranked, base] if key.values.get(base) is not None else ranked
        md += ["## Pairwise: row minus column", "", "| | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
        for a in ranked:
            md.append(f"| {a} | " + " | ".join("" if a == b else _delta(key, a, b) for b in cols) + " |")
        md.append("")
    primary, null = primary_comparison(cfg, results), null_check(cfg, results)
    md += null_markdown(null) + primary_markdown(primary)
    scans = proxy_content_scan(
        reference_shards(cfg), {n: variant_plan(cfg, n).root / "shards" for n in cfg.variants}, cfg.pack.tokenizer
    )
    md += proxy_scan_markdown(scans)
    agreements = proxy_agreements(rows, cfg.rank_by, cfg.seed)
    md += rank_markdown(agreements, cfg.rank_by)
    if missing:
        md += ["## Missing", "", *[f"- {n}: no {cfg.rank_by} result yet" for n in missing], ""]
    md += ["Side-by-side tables and figures of every metric: [report.md](report.md).", ""]
    (out / "sweep.md").write_text("\n".join(md))
    (out / "sweep.json").write_text(
        json.dumps(
            {
                "name": cfg.name,
                "rank_by": cfg.rank_by,
                "baseline": base,
                "ranking": ranking,
                "missing": missing,
                "noise_rule": RULE,
                "primary": primary,
                "null_arm": null,
                "proxy_content_scan": scans,
                "proxy_agreement": [a.to_dict() for a in agreements],
            },
            indent=2,
        )
    )
    log.info("sweep report: %d ranked, %d missing -> %s", len(ranked), len(missing), out / "sweep.md")
    if null is not None and not null["equal"] and not missing:
        raise NullArmMismatch(
            f"sweep report: the null arm {cfg.null_arm} (LR 0) does not give {cfg.baseline}'s probe results "
            f"({'; '.join(null['diffs'][:3]) or 'none'}); see {out / 'sweep.md'}"
        )
    return out / "sweep.md"
