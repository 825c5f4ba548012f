"""Curation speed per source and per step: MB/s per core with every step on, beside a pass-through run.

For each source (repos, commits, pulls, traces, buildlogs) the real reader makes the raw documents once:
installed Python packages read as plain-directory repositories (real code, with vendored copies), this
project's git history as commits, and the shipped samples scaled up (pulls, traces, build logs; each copy
gets a new id and a distinct excerpt of real code, so copies are not duplicates). Then, in this one process,
one after the other on the same raw documents:

- pass-through: read -> validate -> write (what any prep run pays);
- full curation: every stage of `midtrain prep` with every step on (license, decontamination by repository
  and by n-grams, quality, redaction, exact dedup, MinHash signatures, buckets, clusters, dedup filter).

Each stage runs in-process as one task (datatrove's local executor adds only process start-up), and every
step's own CPU time is measured (time inside it, minus time inside the step before it). MB are the raw
documents' text bytes; MB/s per core = MB / CPU seconds. Targets: full curation >= 2 MB/s per core, and no
step above 3x the whole pass-through run.

    .venv/bin/python bench/bench_curate_speed.py [--sources repos,commits] [--mb 4] [--json out.json]
    .venv/bin/python bench/bench_curate_speed.py --vs OTHER_TREE --repeat 3   # old code vs this tree,
                                                                              # interleaved, medians
    .venv/bin/python bench/bench_curate_speed.py --profile repos              # cProfile, top functions
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
CODE = os.environ.get("BENCH_CODE_ROOT", str(ROOT))  # which tree's midtrain runs (for --vs)
sys.path.insert(0, CODE)
sys.path.insert(1, str(ROOT / "bench"))
SOURCES = ("repos", "commits", "pulls", "traces", "buildlogs")
# pure-Python packages of this environment, read as repositories (real code of many styles)
PACKAGES = (
    "requests",
    "urllib3",
    "idna",
    "click",
    "jinja2",
    "yaml",
    "attr",
    "certifi",
    "charset_normalizer",
    "markupsafe",
    "pygments",
    "fsspec",
    "packaging",
    "tqdm",
    "rich",
    "boto3",
    "botocore",
    "dill",
    "multiprocess",
    "sympy",
    "networkx",
    "pandas",
)


# MB of raw document text bench_prep's scaled samples make at scale 1
SAMPLE_MB = {"pulls": 0.9, "traces": 0.85, "buildlogs": 0.65}


def _quiet() -> None:
    import logging

    from datatrove.utils.logging import logger as dt_logger

    dt_logger.remove()
    logging.disable(logging.WARNING)


# ----------------------------------------------------------------------------------------------------------
# inputs


def _packages(mb: float) -> list[str]:
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    out, total = [], 0
    for name in PACKAGES:
        p = site / name
        if not p.is_dir():
            continue
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and f.suffix not in (".pyc", ".so"))
        if total and total + size > mb * 1e6 * 1.5:
            continue
        out.append(str(p))
        total += size
        if total >= mb * 1e6:
            break
    return out


def make_raw(source: str, tmp: Path, mb: float) -> Path:
    """The source stage's raw documents (real reader, in-process) for about ``mb`` MB of input."""
    from datatrove.pipeline.writers import JsonlWriter

    raw = tmp / f"raw_{source}"
    if source == "repos":
        from midtrain.sources.repos import RepoReader

        reader = RepoReader(_packages(mb))
    elif source == "commits":
        from midtrain.sources.commits import CommitReader

        reader = CommitReader([str(ROOT)])
    else:
        from bench_prep import _scaled_inputs

        where = tmp / f"in_{source}"
        where.mkdir(parents=True)
        inputs = _scaled_inputs(where, scale=mb / SAMPLE_MB[source])
        if source == "pulls":
            from midtrain.sources.pulls import PullReader

            reader = PullReader([str(inputs["pulls"])])
        elif source == "traces":
            from midtrain.sources.traces import TraceReader, TracesConfig

            reader = TraceReader([str(inputs["traces"])], TracesConfig(format="plain"))
        else:
            from midtrain.sources.buildlogs import BuildLogReader

            reader = BuildLogReader([str(inputs["buildlogs"])])
    writer = JsonlWriter(str(raw), output_filename="${rank}.jsonl")
    docs = reader.run() if source in ("repos", "commits") else _vary(reader.run(), source)
    for _ in writer.run(docs):
        pass
    return raw


def _vary(docs, source: str):
    """The scaled samples repeat a few documents; each copy gets a distinct excerpt of real code (standard
    library files) in the source's own form, so that copies are not duplicates and every step sees new text."""
    import sysconfig

    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    lines = [ln for f in files[:120] for ln in f.read_text(errors="replace").splitlines()]
    for i, doc in enumerate(docs):
        chunk = lines[(i * 40) % max(1, len(lines) - 40) :][:40]
        if source == "pulls":
            doc.text += f"\n--- Lib/mod_{i}.py (added, +{len(chunk)} -0)\n" + "\n".join("+" + ln for ln in chunk)
        elif source == "buildlogs":
            doc.text += "\n" + "\n".join(f"[{i:05d}.{j:03d}] {ln}" for j, ln in enumerate(chunk))
        else:  # traces: one more tool observation (the loss spans stay where they are)
            doc.text += "\n\n[observation]\n" + "\n".join(chunk)
        yield doc


def _instances(tmp: Path) -> str:
    """Benchmark rows for the n-gram layer (so that step runs): issue texts and patches."""
    path = tmp / "instances.jsonl"
    rows = [
        {
            "instance_id": f"octo__bench-{i}",
            "repo": "octo/bench",
            "problem_statement": f"case {i}: the parser drops the last line of a file when it has no trailing "
            "newline and the caller expects every line back, see the attached reproducer",
            "patch": f"--- a/p.py\n+++ b/p.py\n+def fixed_{i}(lines):\n+    return list(lines) + [{i}]\n",
        }
        for i in range(200)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _warm_caches() -> None:
    """Process-wide lazy loads (the swebench package's repository list, the SPDX license table) out of the
    timings: a prep task pays them once whatever its size."""
    from midtrain.curate.decontam import swebench_package_repos
    from midtrain.curate.license import LicenseConfig, LicenseFilter

    swebench_package_repos()
    LicenseFilter(LicenseConfig()).allowed("MIT")  # loads the SPDX license table


def text_mb(raw: Path) -> tuple[float, int]:
    from midtrain.formats.documents import document_files, read_jsonl

    n = size = 0
    for f in document_files(raw):
        for _, row in read_jsonl(f):
            size += len(row["text"].encode())
            n += 1
    return size / 1e6, n


# ----------------------------------------------------------------------------------------------------------
# in-process runs with per-step CPU time


class _Timed:
    """Wraps a step's output generator; ``spent`` is the CPU time inside its next() calls (upstream included)."""

    def __init__(self, step, data, rank: int, world_size: int):
        t0 = time.process_time()
        gen = step(data, rank, world_size)  # a step that is not a generator does its work here
        self.gen = iter(gen) if gen is not None else iter(())
        self.spent = time.process_time() - t0

    def __iter__(self):
        return self

    def __next__(self):
        t0 = time.process_time()
        try:
            return next(self.gen)
        finally:
            self.spent += time.process_time() - t0


def run_pipeline(steps: list, rank: int = 0, world_size: int = 1) -> list[tuple[str, float]]:
    """Run datatrove steps as one task in-process; [(step name, own CPU seconds)]."""
    data: _Timed | None = None
    timed: list[tuple[Any, _Timed]] = []
    for step in steps:
        data = _Timed(step, data, rank, world_size)
        timed.append((step, data))
    for _ in data or ():
        pass
    out, before = [], 0.0
    for step, t in timed:
        out.append((step.name, t.spent - before))
        before = t.spent
    return out


def run_stages(stages, label: str) -> list[tuple[str, float]]:
    """Every curation stage in order, each task of a multi-task stage one after the other (rank by rank)."""
    rows = []
    for st in stages:
        n = st.tasks or 1
        per_step: dict[str, float] = {}
        for rank in range(n):
            for name, sec in run_pipeline(st.pipeline, rank, n):
                per_step[name] = per_step.get(name, 0.0) + sec
        rows += [(f"{st.name}: {name.split(': ', 1)[-1]}", sec) for name, sec in per_step.items()]
    return rows


def passthrough_steps(raw: Path, out: Path) -> list:
    from midtrain.curate.base import ValidateDocuments
    from midtrain.formats.documents import DocumentReader, DocumentWriter

    return [DocumentReader(str(raw), add_file_path=False), ValidateDocuments(None), DocumentWriter(str(out))]


def measure(source: str, raw: Path, work: Path, instances: str) -> dict:
    """Pass-through then full curation on the same raw documents, CPU seconds per step."""
    from midtrain.curate.stages import CurationConfig, curation_stages

    mb, docs = text_mb(raw)
    if work.exists():
        shutil.rmtree(work)
    c0 = time.process_time()
    passthrough = run_pipeline(passthrough_steps(raw, work / "pass"))
    pass_s = time.process_time() - c0
    cfg = CurationConfig().apply_overrides([f"decontam.instances=[{instances}]"])
    stages = curation_stages(cfg, source, str(raw), str(work / "full" / "documents"), str(work / "full" / "work"))
    c0 = time.process_time()
    steps = run_stages(stages, "full")
    full_s = time.process_time() - c0
    return {
        "source": source,
        "mb": mb,
        "documents": docs,
        "pass_s": pass_s,
        "full_s": full_s,
        "pass_mb_per_s_core": mb / pass_s,
        "full_mb_per_s_core": mb / full_s,
        "full_over_pass": full_s / pass_s,
        "pass_steps": dict(passthrough),
        "steps": dict(steps),
    }


def report(rows: list[dict]) -> None:
    print(f"\n{'source':<10}{'MB':>7}{'docs':>7}{'pass MB/s/core':>16}{'full MB/s/core':>16}{'full/pass':>11}")
    for r in rows:
        print(
            f"{r['source']:<10}{r['mb']:>7.2f}{r['documents']:>7}{r['mb'] / r['pass_s']:>16.2f}"
            f"{r['mb'] / r['full_s']:>16.2f}{r['full_s'] / r['pass_s']:>11.2f}"
        )
    for r in rows:
        print(f"\n{r['source']}: steps of the full run (CPU s, MB/s per core, x the whole pass-through run)")
        for name, sec in r["steps"].items():
            rate = r["mb"] / sec if sec > 0 else float("inf")
            print(f"  {name:<52}{sec:>8.3f}s{rate:>10.2f}{sec / r['pass_s']:>8.2f}x")
        steps = ", ".join(f"{n.split(': ', 1)[-1]} {s:.3f}s" for n, s in r["pass_steps"].items())
        print("  pass-through run: " + steps)


# ----------------------------------------------------------------------------------------------------------
# old code vs this tree, interleaved


def compare(other: str, sources: list[str], mb: float, repeat: int) -> None:
    """Run this script under OTHER's midtrain and this tree's, A B A B ..., and print medians side by side."""
    results: dict[str, list[dict[str, dict]]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="curate_vs_") as tmp:
        for i in range(repeat):
            for label, code in (("old", other), ("new", str(ROOT))):
                out = Path(tmp) / f"{label}{i}.json"
                env = {**os.environ, "BENCH_CODE_ROOT": code, "PYTHONPATH": code}
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--sources",
                        ",".join(sources),
                        "--mb",
                        str(mb),
                        "--json",
                        str(out),
                        "--quiet",
                    ],
                    env=env,
                    check=True,
                )
                results[label].append(json.loads(out.read_text()))
    med = {label: _medians(runs) for label, runs in results.items()}
    print(f"\nmedians of {repeat} interleaved runs: old = {other}, new = {ROOT}")
    print(
        f"{'source':<10}{'pass old':>10}{'pass new':>10}{'full old':>10}{'full new':>10}{'full/pass old':>15}"
        f"{'full/pass new':>15}   (MB/s per core)"
    )
    for s in sources:
        o, n = med["old"][s], med["new"][s]
        print(
            f"{s:<10}{o['pass']:>10.2f}{n['pass']:>10.2f}{o['full']:>10.2f}{n['full']:>10.2f}"
            f"{o['ratio']:>15.2f}{n['ratio']:>15.2f}"
        )
    for s in sources:
        print(f"\n{s}: step CPU seconds, old -> new (x the pass-through run)")
        o, n = med["old"][s], med["new"][s]
        for name in n["steps"]:
            a, b = o["steps"].get(name, float("nan")), n["steps"][name]
            print(f"  {name:<52}{a:>8.3f} -> {b:>7.3f}   ({a / o['pass_s']:.2f}x -> {b / n['pass_s']:.2f}x)")


def _medians(runs: list[dict[str, dict]]) -> dict[str, dict]:
    out = {}
    for s in runs[0]:
        rows = [run[s] for run in runs]
        names = list(rows[0]["steps"])
        out[s] = {
            "pass": statistics.median(r["mb"] / r["pass_s"] for r in rows),
            "full": statistics.median(r["mb"] / r["full_s"] for r in rows),
            "ratio": statistics.median(r["full_s"] / r["pass_s"] for r in rows),
            "pass_s": statistics.median(r["pass_s"] for r in rows),
            "steps": {n: statistics.median(r["steps"].get(n, float("nan")) for r in rows) for n in names},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    from figures import bench_parser

    ap = bench_parser(__doc__)
    ap.add_argument("--sources", default=",".join(SOURCES), help="comma-separated (default: all five)")
    ap.add_argument("--mb", type=float, default=3.0, help="about this many MB of input per source")
    ap.add_argument("--vs", metavar="TREE", help="another checkout of this project: run both, interleaved")
    ap.add_argument("--repeat", type=int, default=3, help="with --vs: runs of each tree")
    ap.add_argument("--profile", metavar="SOURCE", help="cProfile the full curation of one source")
    ap.add_argument("--quiet", action="store_true", help="no tables (with --json)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.mb = 0.02
    sources = [s for s in args.sources.split(",") if s]
    bad = [s for s in sources if s not in SOURCES]
    if bad:
        ap.error(f"--sources: unknown {bad} (choose from {', '.join(SOURCES)})")
    if args.vs:
        compare(args.vs, sources, args.mb, args.repeat)
        return 0
    _quiet()
    _warm_caches()
    rows = []
    with tempfile.TemporaryDirectory(prefix="curate_speed_") as tmp_dir:
        tmp = Path(tmp_dir)
        instances = _instances(tmp)
        for source in [args.profile] if args.profile else sources:
            raw = make_raw(source, tmp, args.mb)
            if args.profile:
                import cProfile
                import pstats

                measure(source, raw, tmp / "warm", instances)  # imports and lazy indexes out of the profile
                prof = cProfile.Profile()
                prof.enable()
                measure(source, raw, tmp / "work", instances)
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(35)
                return 0
            rows.append(measure(source, raw, tmp / f"work_{source}", instances))
    if not args.quiet:
        report(rows)
    if args.json:
        Path(args.json).write_text(json.dumps({r["source"]: r for r in rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
