"""Curation: secret/PII recall on planted real code, false positives on clean real code, and curation cost.

Redaction quality (target: recall >= 99%, <= 1% of clean files changed by secret detectors):
  planted  real .py files (stdlib + this venv's site-packages) written as code, diffs and build logs with
           generated secrets of every kind planted in realistic contexts (midtrain/curate/planted.py);
  clean    other real files with nothing planted. E-mail and IP findings in clean files are reported apart:
           real files carry real author e-mails, which the PII step is meant to remove.
Curation cost, side by side on the same synthetic corpus (repositories built from stdlib files, with forks
and vendored copies, plus PR-like documents): the full curation run vs a pass-through run (read, validate,
write), and each step's share of the time.

    .venv/bin/python bench/bench_curate.py [--files 1200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from midtrain.curate.planted import measure, plant, read_texts, real_code_files  # noqa: E402
from midtrain.curate.runner import run_stages  # noqa: E402
from midtrain.curate.secrets import Redactor  # noqa: E402
from midtrain.curate.stages import CurationConfig, curation_stages  # noqa: E402


def redaction(files: int, seed: int) -> dict:
    texts = read_texts(real_code_files(files, seed=seed))
    random.Random(seed).shuffle(texts)
    half = len(texts) // 2
    planted = plant(texts[:half], per_doc=3, seed=seed)
    clean = texts[half:]
    r = Redactor()
    t0 = time.perf_counter()
    rep = measure(r.redact, planted, clean)
    dt = time.perf_counter() - t0
    mb = (sum(len(d.text) for d in planted) + sum(len(t) for _, t in clean)) / 1e6
    return {"planted_secrets": rep.planted, "planted_docs": len(planted), "recall": rep.recall,
            "per_kind_recall": {k: c / n for k, (c, n) in rep.per_kind.items()},
            "clean_files": rep.clean_files, "clean_changed_by_secret_detectors": rep.clean_changed_secrets,
            "false_positive_rate": rep.fp_rate, "clean_changed_any_detector": rep.any_change_rate,
            "clean_changed_by_kind": rep.clean_changed_by_kind, "structure_errors": rep.structure_errors,
            "missed_examples": rep.missed[:5], "false_positive_examples": rep.false_positive_examples[:5],
            "redact_mb_per_s": mb / dt, "corpus_mb": mb}


def synthetic_corpus(raw: Path, n_repos: int, seed: int) -> float:
    """Repository documents (sources' format) from stdlib files, 20% forks, some vendored files; PR docs."""
    rng = random.Random(seed)
    texts = read_texts(real_code_files(400, seed=seed + 1, max_bytes=60_000))
    raw.mkdir(parents=True)
    rows, repos = [], []
    for i in range(n_repos):
        if repos and rng.random() < 0.2:
            name, files = f"fork{i}/{repos[-1][0].split('/')[1]}", dict(repos[-1][1])  # a fork
        else:
            files = {Path(p).name + f".{j}": t for j, (p, t) in enumerate(rng.sample(texts, 6))}
            if repos and rng.random() < 0.3:
                files.update(dict(list(rng.choice(repos)[1].items())[:1]))  # a vendored file
            name = f"org{i}/repo{i}"
        repos.append((name, files))
        header = f"<|repo_name|>{name}\n"
        text, offsets = header, []
        for path, body in files.items():
            offsets.append(len(text))
            text += f"<|file_sep|>{path}\n{body}"
        rows.append({"text": text, "id": f"repo:{name}", "metadata": {
            "source": "repo", "repo": name, "license": "MIT", "id": f"repo:{name}", "files": list(files),
            "file_offsets": offsets}})
    for i in range(n_repos * 2):
        _, t = rng.choice(texts)
        rows.append({"text": f"PR #{i}: refactor\n\n" + t[:4000], "id": f"pr-{i}", "metadata": {
            "source": "pr", "repo": f"org{i}/repo{i}", "license": "MIT", "id": f"pr-{i}"}})
    rng.shuffle(rows)
    size = 0
    for k in range(2):
        with open(raw / f"{k:05d}.jsonl", "w") as f:
            for r in rows[k::2]:
                f.write(json.dumps(r) + "\n")
                size += len(r["text"])
    return size / 1e6


def cost(n_repos: int, seed: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench_curate_"))
    try:
        mb = synthetic_corpus(tmp / "raw", n_repos, seed)
        out = {"corpus_mb": mb}
        off = ["license.enabled=false", "decontam.enabled=false", "quality.enabled=false", "redact.enabled=false",
               "dedup.enabled=false"]
        for label, cfg in (("passthrough", CurationConfig().apply_overrides(off)), ("full", CurationConfig())):
            work = tmp / label
            stages = curation_stages(cfg, "repo", str(tmp / "raw"), str(work / "p" / "documents"), str(work / "w"))
            t0 = time.perf_counter()
            result = run_stages(stages, work / "logs", tasks=2, workers=1)
            out[f"{label}_s"] = time.perf_counter() - t0
            if label == "full":
                out["stage_counts"] = {s: {k: v for k, v in c.items() if k.startswith(("dropped_", "removed_",
                                                                                       "changed_"))}
                                       for st in result.values() for s, c in st.items()}
                out["step_seconds"] = _step_times(work / "logs")
        out["full_over_passthrough"] = out["full_s"] / out["passthrough_s"]
        out["full_mb_per_s"] = mb / out["full_s"]
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _step_times(logs: Path) -> dict[str, float]:
    times = {}
    for f in sorted(logs.glob("*/stats.json")):
        for st in json.loads(f.read_text()):
            ts = st.get("time_stats", 0.0)
            total = ts.get("total", 0.0) if isinstance(ts, dict) else float(ts)
            times[f"{f.parent.name}: {st['name'].split(': ', 1)[-1]}"] = total
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1200, help="real files sampled (half planted, half clean)")
    ap.add_argument("--repos", type=int, default=60, help="repositories in the cost corpus")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)

    red = redaction(args.files, args.seed)
    print(f"\nSecret/PII redaction on real code ({red['corpus_mb']:.1f} MB)")
    print(f"{'figure':<44}{'value':>12}")
    print(f"{'planted secrets (docs)':<44}{red['planted_secrets']:>7} ({red['planted_docs']})")
    print(f"{'recall (target >= 0.99)':<44}{red['recall']:>12.4f}")
    print(f"{'clean files':<44}{red['clean_files']:>12}")
    print(f"{'clean files changed, secret detectors (<=0.01)':<44}{red['false_positive_rate']:>12.4f}")
    print(f"{'clean files changed, any detector (incl. PII)':<44}{red['clean_changed_any_detector']:>12.4f}")
    print(f"{'diff/line structure errors':<44}{red['structure_errors']:>12}")
    print(f"{'redaction throughput (MB/s, 1 core)':<44}{red['redact_mb_per_s']:>12.2f}")
    print("\nrecall per kind: " + ", ".join(f"{k} {v:.3f}" for k, v in red["per_kind_recall"].items()))
    print("clean files changed by kind: " + json.dumps(red["clean_changed_by_kind"]))
    for kind, line in red["missed_examples"]:
        print(f"  missed {kind}: {line[:100]}")

    c = cost(args.repos, args.seed)
    print(f"\nCuration cost ({c['corpus_mb']:.1f} MB synthetic repos + PRs, 2 tasks, 1 worker)")
    print(f"{'run':<44}{'seconds':>12}")
    print(f"{'pass-through (read, validate, write)':<44}{c['passthrough_s']:>12.2f}")
    print(f"{'full curation (all steps, 7 stages)':<44}{c['full_s']:>12.2f}")
    print(f"{'full / pass-through':<44}{c['full_over_passthrough']:>12.2f}")
    print(f"{'full curation MB/s':<44}{c['full_mb_per_s']:>12.2f}")
    print("\nstep time (s, summed over tasks):")
    for k, v in sorted(c["step_seconds"].items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {k:<60}{v:>8.2f}")
    print("\ndrops/changes by reason:")
    for step, counts in c["stage_counts"].items():
        if counts:
            print(f"  {step.split(': ', 1)[-1]}: " + ", ".join(f"{k}={int(v)}" for k, v in counts.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"redaction": red, "cost": c}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
