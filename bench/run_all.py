"""Run the CPU benchmark suite and write one table (Markdown + JSON).

Each bench/bench_*.py script measures its figures side by side in one run (ratios against a baseline on the
same input) and writes them as JSON with ``--json PATH``; this collects them with the machine they ran on.

    .venv/bin/python bench/run_all.py --out bench/results      # or: make bench

The interface every script follows: ``bench_X.py --json PATH [--smoke]``, exit 0, a JSON object of figures at
PATH; ``--smoke`` runs it at a size of seconds (the test suite runs each script that way, timing nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }


def _flatten(prefix: str, value: object, out: dict[str, object]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results", help="output directory for results.md / results.json")
    ap.add_argument("--only", nargs="*", help="run only these scripts (e.g. bench_pack)")
    ap.add_argument("--smoke", action="store_true", help="each script at a size of seconds (figures mean nothing)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scripts = sorted(p for p in HERE.glob("bench_*.py") if not args.only or p.stem in args.only)
    results: dict[str, dict] = {}
    failures: dict[str, str] = {}
    for script in scripts:
        json_path = out / f"{script.stem}.json"
        t0 = time.time()
        print(f"== {script.stem}", flush=True)
        cmd = [sys.executable, str(script), "--json", str(json_path)] + (["--smoke"] if args.smoke else [])
        proc = subprocess.run(
            cmd, text=True, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        )
        if proc.returncode != 0 or not json_path.exists():
            failures[script.stem] = f"exit {proc.returncode}" + ("" if json_path.exists() else f", no {json_path.name}")
            continue
        figures = json.loads(json_path.read_text())
        if not isinstance(figures, dict) or not figures:
            failures[script.stem] = f"{json_path.name} holds no figures (a JSON object expected)"
            continue
        results[script.stem] = {"seconds": round(time.time() - t0, 1), "figures": figures}
    report = {"machine": machine(), "results": results, "failures": failures}
    (out / "results.json").write_text(json.dumps(report, indent=2))
    lines = [
        "# midtrain CPU benchmark suite",
        "",
        f"Machine: {report['machine']}",
        "",
        "| benchmark | figure | value |",
        "|---|---|---|",
    ]
    for name, res in results.items():
        flat: dict[str, object] = {}
        _flatten("", res["figures"], flat)
        for key, value in flat.items():
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            lines.append(f"| {name} | {key} | {shown} |")
    for name, why in failures.items():
        lines.append(f"| {name} | FAILED | {why} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {out / 'results.md'} and {out / 'results.json'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
