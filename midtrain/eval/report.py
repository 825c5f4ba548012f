"""The comparison report: benchmark x checkpoint with deltas against the baseline, plus plots.

Like the paper's table, SWE-bench resolved rates after the identical SFT probe come first; the probe's own
held-out loss and the base-model proxy metrics (held-out loss per source, long-context retrieval) follow,
beside it, not instead of it. Writes report.md, report.html, results.json and PNG figures.
"""

from __future__ import annotations

import html
import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midtrain.eval.benchmarks import BENCHMARKS, HARNESSES
from midtrain.eval.noise import NO_BAND, RULE, Comparison, compare, spread
from midtrain.eval.results import CheckpointResults, load_checkpoint_results
from midtrain.formats.outputs import claim, make_stamp

log = logging.getLogger(__name__)

BENCH_TITLES = {name: b.title for name, b in BENCHMARKS.items()}  # the report's row names


@dataclass
class Row:
    group: str
    metric: str
    values: dict[str, float | None]  # checkpoint name -> value (the mean over seeds)
    higher_is_better: bool
    fmt: str = "{:.3f}"
    delta_fmt: str = "{:+.3f}"
    samples: dict[str, list[float]] = field(default_factory=dict)  # checkpoint name -> one value per seed
    keys: dict[str, list[str]] = field(default_factory=dict)  # checkpoint name -> the seed of each sample
    missing: dict[str, str] = field(default_factory=dict)  # checkpoint name -> why its cell is not shown


def _value(get: Callable[[Any], Any], obj: Any) -> float | None:
    try:
        v = get(obj)
    except (KeyError, TypeError, AttributeError):
        return None
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def build_rows(results: list[CheckpointResults]) -> list[Row]:
    rows: list[Row] = []

    def add(group, metric, get, higher: bool, fmt="{:.3f}", delta_fmt="{:+.3f}", runs=None, step="") -> None:
        """``get`` reads one result; with ``runs`` (checkpoint -> its per-seed results) it is read on each seed.
        STEP names the result (``sft``, ``swebench/verified``): a column where it is missing shows why."""
        values: dict[str, float | None] = {}
        samples: dict[str, list[float]] = {}
        keys: dict[str, list[str]] = {}
        missing: dict[str, str] = {}
        for r in results:
            why = next((r.missing[k] for k in (step.split("/")[0], step) if k in r.missing), None)
            if why is not None:
                samples[r.name], values[r.name], missing[r.name] = [], None, why
                continue
            if runs is None:
                v = _value(get, r)
                samples[r.name] = [] if v is None else [v]
                keys[r.name] = [] if v is None else ["-"]
            else:
                read = [(run.get("seed_dir") or str(i), _value(get, run)) for i, run in enumerate(runs(r))]
                samples[r.name] = [v for _, v in read if v is not None]
                keys[r.name] = [k for k, v in read if v is not None]
            values[r.name] = spread(samples[r.name]).mean if samples[r.name] else None
        if any(v is not None for v in values.values()) or (missing and step.startswith("swebench/")):
            rows.append(Row(group, metric, values, higher, fmt, delta_fmt, samples, keys, missing))

    for bench, title in BENCH_TITLES.items():
        add(
            "SWE-bench (after the SFT probe), % resolved",
            title,
            lambda r, b=bench: 100.0 * r.swebench[b]["rate"],
            True,
            "{:.1f}",
            "{:+.1f}",
            step=f"swebench/{bench}",
        )
    for bench, title in BENCH_TITLES.items():  # what a small model registers where the resolve rate reads 0
        add(
            "Agent leg: replies with one action the agent can parse, %",
            title,
            lambda r, b=bench: 100.0 * r.swebench[b]["actions"]["rate"],
            True,
            "{:.1f}",
            "{:+.1f}",
            step=f"swebench/{bench}",
        )
    # benchmark x harness (robustness across agent harnesses): the same server and checkpoint, another agent
    for bench, title in BENCH_TITLES.items():
        for harness in HARNESSES[1:]:
            add(
                "SWE-bench by agent harness, % resolved",
                f"{title} · {harness}",
                lambda r, k=f"{bench}/{harness}": 100.0 * r.swebench[k]["rate"],
                True,
                "{:.1f}",
                "{:+.1f}",
                step=f"swebench/{bench}/{harness}",
            )
    probe = lambda r: r.sft_runs  # noqa: E731 - every seed of the probe
    add("SFT probe", "held-out loss, assistant tokens", lambda s: s["heldout_loss"], False, runs=probe, step="sft")
    add("SFT probe", "final train loss", lambda s: s["final_train_loss"], False, runs=probe, step="sft")
    for metric, key in (
        ("held-out command tokens, teacher-forced accuracy", "token_accuracy"),
        ("held-out commands, every token right", "command_match"),
    ):
        add(
            "SFT probe",
            metric,
            lambda s, k=key: 100.0 * s["command_accuracy"][k],
            True,
            "{:.1f}%",
            "{:+.1f}",
            runs=probe,
            step="sft",
        )
    sources = sorted({s for r in results if r.proxy for s in (r.proxy.get("heldout") or {}).get("per_source", {})})
    for src in sources:
        add(
            "Proxy: held-out loss (before SFT)",
            src,
            lambda r, s=src: r.proxy["heldout"]["per_source"][s]["loss"],
            False,
            step="proxy",
        )
    add(
        "Proxy: held-out loss (before SFT)",
        "all sources",
        lambda r: r.proxy["heldout"]["all"]["loss"],
        False,
        step="proxy",
    )
    tasks = sorted(
        {
            (t, m)
            for r in results
            if r.lm_eval
            for t, row in (r.lm_eval.get("tasks") or {}).items()
            for m in row
            if "stderr" not in m
        }
    )
    for task, metric in tasks:
        add(
            "Proxy: lm-evaluation-harness (before SFT)",
            f"{task} {metric}",
            lambda r, t=task, m=metric: r.lm_eval["tasks"][t][m],
            "loss" not in metric and "perplexity" not in metric,
            step="lm_eval",
        )
    proxies = lambda r: r.proxy_runs  # noqa: E731 - the retrieval probe's needles are drawn per seed
    add(
        "Proxy: code retrieval (before SFT)",
        "accuracy, mean over depth x length",
        lambda p: 100.0 * p["retrieval"]["accuracy"],
        True,
        "{:.1f}%",
        "{:+.1f}",
        runs=proxies,
        step="proxy",
    )
    add(
        "Proxy: code retrieval (before SFT)",
        "answer NLL per token, mean",
        lambda p: p["retrieval"]["answer_nll"],
        False,
        runs=proxies,
        step="proxy",
    )
    return rows


def has_seeds(rows: list[Row]) -> bool:
    """Whether any value is a mean over more than one seed (then the report states the noise rule)."""
    return any(len(v) > 1 for row in rows for v in row.samples.values())


def comparison(row: Row, name: str, baseline: str) -> Comparison | None:
    """NAME minus BASELINE on ROW (midtrain.eval.noise: paired over shared seeds, else Welch), or None."""
    a, b = row.samples.get(baseline), row.samples.get(name)
    if not a or not b:
        return None
    return compare(a, b, row.keys.get(baseline), row.keys.get(name))


def delta_mark(row: Row, name: str, baseline: str) -> str:
    """▲ better / ▼ worse when the delta's interval excludes 0; '≈' when it holds 0; with one sample on a side,
    no mark but NO_BAND (midtrain.eval.noise.RULE)."""
    v, b = row.values.get(name), row.values.get(baseline)
    if v is None or b is None:
        return ""
    c = comparison(row, name, baseline)
    if c is None or c.verdict is None:
        return f", {NO_BAND}"
    if c.verdict is False:
        return " ≈"
    return " ▲" if (v > b) == row.higher_is_better else " ▼"


def _cell(row: Row, name: str, baseline: str) -> str:
    v = row.values.get(name)
    if name in row.missing:
        why = row.missing[name]
        why = why.replace("|", "/")  # a table cell
        return "missing: " + (why if len(why) <= 100 else why[:97] + "...")
    if v is None:
        return "—"
    text = row.fmt.format(v)
    seeds = row.samples.get(name) or []
    if len(seeds) > 1:
        text += f" ± {row.fmt.format(spread(seeds).sd).rstrip('%')} (k={len(seeds)})"
    b = row.values.get(baseline)
    if name != baseline and b is not None:
        text += f" ({row.delta_fmt.format(v - b)}{delta_mark(row, name, baseline)})"
    return text


def markdown_table(rows: list[Row], names: list[str], baseline: str) -> str:
    head = ["metric", *[f"{n} (baseline)" if n == baseline else n for n in names]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    group = None
    for row in rows:
        if row.group != group:
            group = row.group
            lines.append("| **" + group + "** |" + " |" * len(names))
        lines.append("| " + " | ".join([row.metric, *[_cell(row, n, baseline) for n in names]]) + " |")
    return "\n".join(lines)


# -- figures -----------------------------------------------------------------------------------------
def _loss_key(rows: list[dict[str, Any]]) -> str | None:
    for key in ("loss", "lm_loss", "train_loss"):
        if any(key in r for r in rows):
            return key
    return None


def plot_curves(results: list[CheckpointResults], path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("SFT probe: train loss", "sft_curve"), ("midtraining: train loss", "midtrain_curve")]
    panels = [(t, a) for t, a in panels if any(getattr(r, a) for r in results)]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (title, attr) in zip(axes[0], panels):
        for r in results:
            rows = getattr(r, attr)
            key = _loss_key(rows)
            if key:
                pts = [(row["step"], row[key]) for row in rows if isinstance(row.get(key), (int, float))]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=r.name)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def heldout_statement(probe: dict[str, dict]) -> list[str]:
    """What the probe's held-out set is (instances, documents, scored tokens) and whether any training shard
    holds one of its task instances (any document of one), as every checkpoint's probe checked it."""
    held = {n: h for n, s in probe.items() if (h := s.get("heldout"))}
    if not held:
        return ["Held-out traces: **not recorded** (a probe result from before held-out splits were recorded)."]
    h = next(iter(held.values()))
    found = {n: x.get("in_training_shards") for n, x in held.items()}
    where = ", ".join(f"`{p}`" for p in h.get("recorded") or [])
    tokens = {x.get("tokens") for x in held.values()}
    line = (
        f"Held-out traces: {h.get('instances')} instances ({h.get('documents')} documents, "
        f"{', '.join(str(t) for t in sorted(tokens, key=str))} assistant tokens scored), split by "
        f"{', '.join(h.get('by') or [])} at fraction {', '.join(map(str, h.get('fraction') or []))}, recorded in "
        f"{where}; no pack trains on a held-out instance."
    )
    excluded = {k: v for x in held.values() for k, v in (x.get("excluded_from_pack") or {}).items()}

    def kept(v: Any) -> str:  # a dict (instances, documents) or, from older probes, a document count
        if isinstance(v, dict):
            return (
                f"{'?' if v.get('instances') is None else v['instances']} instances "
                f"({'?' if v.get('documents') is None else v['documents']} documents)"
            )
        return f"{'?' if v is None else v} documents"

    if excluded:
        line += (
            " Kept out of training by the midtraining packs (validation split only): "
            + ", ".join(f"{kept(v)} (`{k}`)" for k, v in sorted(excluded.items()))
            + "."
        )
    counted = "instances" if all(x.get("counted") == "instances" for x in held.values()) else "documents"
    if all(v == 0 for v in found.values()):
        shards = sorted({s for x in held.values() for s in x.get("checked_training_shards") or []})
        line += (
            f" No held-out {counted[:-1]} is in any training shard (counted by {counted}; checked: "
            f"{', '.join(f'`{s}`' for s in shards)})."
        )
    else:
        line += f" **Held-out {counted} found in training shards**: {found}."
    return [line, *content_statement(held)]


def content_statement(held: dict[str, dict]) -> list[str]:
    """What the probes' content scans (midtrain.curate.leak_scan) found: each training shard dir once."""
    scans = {s["shards"]: s for x in held.values() for s in x.get("content_scan") or []}
    if not scans:
        return ["", "Held-out traces by content: **not scanned** (a probe result from before the content scan)."]
    leaks = [s for s in scans.values() if s["leak"]]
    limit = f"{next(iter(scans.values()))['max_overlap']:.0%}"
    head = (
        f"**Held-out text found in training shards by content** ({len(leaks)} of {len(scans)} shard dirs above "
        f"{limit} of the held-out n-grams)"
        if leaks
        else f"Held-out traces by content: no training shard holds more than {limit} of the held-out traces' "
        "word n-grams"
    )
    rows = [
        f"- `{s['shards']}`: {s['heldout_ngrams_found']:,} of {s['heldout_ngrams']:,} {s['ngram_size']}-grams "
        f"({s['overlap']:.2%}) in {s['sequences_with_overlap']} of {s['sequences']} sequences"
        for _, s in sorted(scans.items())
    ]
    return ["", head + ":", "", *rows]


def plot_heldout(results: list[CheckpointResults], path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    have = [r for r in results if r.proxy and (r.proxy.get("heldout") or {}).get("per_source")]
    if not have:
        return None
    sources = sorted({s for r in have for s in (r.proxy or {})["heldout"]["per_source"]})  # proxy: set in `have`
    width = 0.8 / len(have)
    fig, ax = plt.subplots(figsize=(max(5, 1.5 * len(sources) + 2), 4))
    for i, r in enumerate(have):
        per = (r.proxy or {})["heldout"]["per_source"]
        ys = [per.get(s, {}).get("loss", float("nan")) for s in sources]
        ax.bar([j + i * width for j in range(len(sources))], ys, width, label=r.name)
    ax.set_xticks([j + width * (len(have) - 1) / 2 for j in range(len(sources))], sources)
    ax.set_ylabel("held-out loss (nats/token)")
    ax.set_title("Held-out loss per source (before SFT)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def retrieval_grid(retrieval: dict[str, Any], metric: str) -> tuple[list[float], list[int], list[list[float]]]:
    """Mean of ``metric`` over tasks and samples per (depth, length): rows = depths, cols = lengths."""
    depths, lengths = retrieval["depths"], retrieval["lengths"]
    acc: dict[tuple[float, int], list[float]] = {}
    for c in retrieval["cells"]:
        if c.get(metric) is not None:
            acc.setdefault((c["depth"], c["length"]), []).append(c[metric])
    grid = [
        [(sum(acc[(d, n)]) / len(acc[(d, n)])) if acc.get((d, n)) else float("nan") for n in lengths] for d in depths
    ]
    return depths, lengths, grid


def plot_retrieval(results: list[CheckpointResults], path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    have = [r for r in results if r.proxy and (r.proxy.get("retrieval") or {}).get("cells")]
    if not have:
        return None
    nlls = [
        c["answer_nll"]
        for r in have
        for c in (r.proxy or {})["retrieval"]["cells"]  # proxy: set in `have`
        if c.get("answer_nll") is not None
    ]
    nll_lim = (min(nlls), max(nlls)) if nlls else None  # one scale for every checkpoint: comparable colours
    metrics = [
        ("accuracy", "exact-match accuracy", "viridis", (0.0, 1.0)),
        ("answer_nll", "answer NLL/token", "magma_r", nll_lim),
    ]
    fig, axes = plt.subplots(len(have), 2, figsize=(11, 3.2 * len(have)), squeeze=False)
    for i, r in enumerate(have):
        for j, (metric, label, cmap, lim) in enumerate(metrics):
            ax = axes[i][j]
            depths, lengths, grid = retrieval_grid((r.proxy or {})["retrieval"], metric)
            im = ax.imshow(grid, cmap=cmap, aspect="auto", vmin=lim[0] if lim else None, vmax=lim[1] if lim else None)
            ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
            ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel("needle depth")
            ax.set_title(f"{r.name}: {label}")
            for y, row in enumerate(grid):
                for x, v in enumerate(row):
                    if not math.isnan(v):
                        r_, g_, b_, _ = im.cmap(im.norm(v))
                        dark = 0.299 * r_ + 0.587 * g_ + 0.114 * b_ < 0.5  # text colour readable on the cell
                        ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if dark else "k")
            fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _training_data(results: list) -> list[str]:
    """Links to the data cards of the shards the proxy evals read (what the checkpoints were measured on).

    A card is what `midtrain inspect SHARDS --card` writes (SHARDS/datacard.md); shards without one get that
    command instead, so a reader of the report knows how to see the data's composition.
    """
    shards = sorted(
        {
            str((r.proxy or {}).get("config", {}).get("shards"))
            for r in results
            if (r.proxy or {}).get("config", {}).get("shards")
        }
    )
    if not shards:
        return []
    lines = ["## Training data", ""]
    for d in shards:
        card = Path(d) / "datacard.md"
        lines.append(
            f"- `{d}`: data card [{card}]({card.resolve()})"
            if card.is_file()
            else f"- `{d}`: no data card yet (`midtrain inspect {d} --card` writes one)"
        )
    return lines + [""]


# -- the report --------------------------------------------------------------------------------------
def write_report(
    runs: Mapping[str, str | Path],
    output: str | Path,
    baseline: str | None = None,
    title: str = "midtraining comparison",
    notes: dict[str, str] | None = None,
    checkpoints: Mapping[str, str | Path] | None = None,
    steps: list[str] | None = None,
) -> Path:
    """Compare checkpoints (name -> protocol directory); returns the path of report.md. CHECKPOINTS (name ->
    the checkpoint the column is of) and STEPS (the step directories the run's config names) decide what each
    column shows (eval.results.load_checkpoint_results); what is missing is listed in results.json's
    ``missing``. The report's directory is claimed (formats.outputs): two reports never write one."""
    if not runs:
        raise ValueError("no checkpoints to compare")
    names = list(runs)
    baseline = baseline or names[0]
    if baseline not in runs:
        raise ValueError(f"baseline '{baseline}' is not one of {names}")
    checkpoints = checkpoints or {}
    unknown = sorted(set(checkpoints) - set(runs))
    if unknown:
        raise ValueError(f"--checkpoint {unknown[0]}: not one of the checkpoints compared {names}")
    out = Path(output)
    results = [load_checkpoint_results(n, p, checkpoints.get(n), steps) for n, p in runs.items()]
    want = make_stamp(
        "report", {r.name: r.checkpoint_id for r in results}, {"runs": {n: str(p) for n, p in runs.items()}}
    )
    with claim(out, "report", want) as c:
        path = _write(results, out, baseline, title, notes or {})
        c.complete()
    return path


def _write(results: list[CheckpointResults], out: Path, baseline: str, title: str, notes: dict[str, str]) -> Path:
    names = [r.name for r in results]
    rows = build_rows(results)
    figures = {
        "curves": plot_curves(results, out / "curves.png"),
        "heldout": plot_heldout(results, out / "heldout_loss.png"),
        "retrieval": plot_retrieval(results, out / "retrieval_heatmap.png"),
    }

    md = [f"# {title}", ""]
    md += [
        f"Checkpoints compared after the identical SFT probe; deltas against **{baseline}** "
        "(▲ better, ▼ worse). Base-model proxy metrics are reported beside the probe, not instead of it.",
        "",
    ]
    probe = {r.name: r.sft for r in results if r.sft}
    if probe:
        recipes = {s.get("recipe") for s in probe.values()}
        shas = {s.get("probe_sha") for s in probe.values()}
        same = len(recipes) == 1 and len(shas) == 1 and len({s.get("data_sha") for s in probe.values()}) == 1
        md.append(
            f"SFT probe: recipe `{', '.join(sorted(map(str, recipes)))}`, "
            f"{'identical settings for every checkpoint' if same else '**settings differ between checkpoints**'}"
            f" (probe hash {', '.join(sorted(map(str, shas)))})."
        )
        md += heldout_statement(probe)
        md.append("")
    md += [markdown_table(rows, names, baseline) if rows else "_No results found yet._", ""]
    if has_seeds(rows):
        md += [f"Values over several seeds are mean ± sample standard deviation (k seeds). Seed noise: {RULE}.", ""]
    md += ["| checkpoint | what it is | start | probe run |", "|---|---|---|---|"]
    for r in results:
        md.append(
            f"| {r.name} | {notes.get(r.name, '')} | `{(r.sft or {}).get('from', '—')}` | "
            f"`{(r.sft or {}).get('run_dir', '—')}` |"
        )
    md.append("")
    captions = {
        "curves": "Training curves",
        "heldout": "Held-out loss per source",
        "retrieval": "Long-context retrieval: needle depth x context length",
    }
    for key, path in figures.items():
        if path:
            md += [f"## {captions[key]}", "", f"![{captions[key]}]({path.name})", ""]
    md += _training_data(results)
    problems = [p for r in results for p in r.problems]
    if problems:
        md += ["## Missing results", ""] + [f"- {p}" for p in problems] + [""]
    (out / "report.md").write_text("\n".join(md))
    (out / "report.html").write_text(_html(title, md, rows, names, baseline, figures, captions))
    summary = {
        "title": title,
        "baseline": baseline,
        "checkpoints": {r.name: str(r.root) for r in results},
        "rows": [
            {
                "group": row.group,
                "metric": row.metric,
                "higher_is_better": row.higher_is_better,
                "values": row.values,
                "samples": row.samples,
            }
            for row in rows
        ],
        "sft": probe,
        "problems": problems,
        "missing": {r.name: r.missing for r in results if r.missing},
    }
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    log.info("report: %d rows x %d checkpoints -> %s", len(rows), len(names), out / "report.md")
    return out / "report.md"


def _html(
    title: str,
    md: list[str],
    rows: list[Row],
    names: list[str],
    baseline: str,
    figures: dict[str, Path | None],
    captions: dict[str, str],
) -> str:
    e = html.escape
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>{e(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child{text-align:left}"
        ".g td{background:#eee;font-weight:bold;text-align:left}</style>",
        f"<h1>{e(title)}</h1>",
        f"<p>Deltas against <b>{e(baseline)}</b> (▲ better, ▼ worse), after the identical SFT probe.</p>",
        "<table><tr><th>metric</th>" + "".join(f"<th>{e(n)}</th>" for n in names) + "</tr>",
    ]
    group = None
    for row in rows:
        if row.group != group:
            group = row.group
            parts.append(f"<tr class='g'><td colspan='{len(names) + 1}'>{e(group)}</td></tr>")
        parts.append(
            "<tr><td>"
            + e(row.metric)
            + "</td>"
            + "".join(f"<td>{e(_cell(row, n, baseline))}</td>" for n in names)
            + "</tr>"
        )
    parts.append("</table>")
    for key, path in figures.items():
        if path:
            parts.append(f"<h2>{e(captions[key])}</h2><img src='{e(path.name)}' style='max-width:100%'>")
    missing = [line for line in md if line.startswith("- ")]
    if missing:
        parts.append("<h2>Missing results</h2><ul>" + "".join(f"<li>{e(m[2:])}</li>" for m in missing) + "</ul>")
    return "\n".join(parts) + "\n"
