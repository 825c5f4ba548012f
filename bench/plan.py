"""Plan a data-prep + training run before spending it: core-hours, disk and --tasks per stage, training time.

From per-core rates (measured with bench/bench_prep.py, bench/bench_curate.py and bench/bench_tokenize.py;
pass their --json outputs with --rates, or the defaults below are used), the raw input size per source
and a target mixture, it prints per source and stage (read, curate, tokenize, pack):

- core-hours (input MB / (MB/s per core) / 3600),
- disk written by the stage (raw and curated JSONL.gz, tokenized cache and shards at 4 bytes per token),
- a suggested ``--tasks`` so that one task runs about ``--task-hours`` on one core,
- tokens available after curation against the mixture's target (repeats needed, and whether the cap holds),

then the training time for the mixture's total tokens at ``--tokens-per-s-per-gpu`` on ``--gpus`` GPUs.
The 500B-token example of README.md::

    .venv/bin/python bench/plan.py --total-tokens 500e9 --gpus 512 --tokens-per-s-per-gpu 8000 \\
        --input repos=3TB commits=1TB pulls=200GB traces=50GB buildlogs=300GB \\
        --mixture repos=0.55 commits=0.15 pulls=0.1 traces=0.1 buildlogs=0.1

Every figure is a model, not a measurement: it is as good as the rates (measure them on your nodes) and
the assumed fractions (``--keep``: bytes kept by curation; ``--bytes-per-token``; ``--gzip-ratio``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

SOURCES = ("repos", "commits", "pulls", "buildlogs", "traces")

# MB/s of input per core, measured on a shared, loaded 2-core x86 VM (2026-11): readers with
# bench/bench_prep.py (traces with the chat template), tokenization with bench/bench_tokenize.py (Qwen3, code);
# curation is bench/bench_curate.py's full-curation figure (~1 MB/s per core, every step on). Packing is
# not CPU-bound (it copies token ids into shards): 50 MB/s of text per core is an assumption, not a
# measurement. Measure on your own nodes and pass the JSON outputs with --rates.
DEFAULT_RATES = {
    "read": {"repos": 0.76, "commits": 5.86, "pulls": 8.73, "buildlogs": 1.85, "traces": 0.78},
    "curate": 1.0,
    "tokenize": 1.26,
    "pack": 50.0,
}
DEFAULT_KEEP = {"repos": 0.45, "commits": 0.6, "pulls": 0.7, "buildlogs": 0.3, "traces": 0.8}
UNITS = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> float:
    """'3TB', '200GB', '1.5e12' -> bytes."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in UNITS:
        raise ValueError(f"size {text!r}: expected a number with an optional unit (KB, MB, GB, TB, PB, GiB...)")
    return float(m.group(1)) * UNITS[m.group(2).upper()]


def parse_pairs(items: list[str], what: str, value=float) -> dict[str, float]:
    out = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or key not in SOURCES:
            raise ValueError(f"{what} {item!r}: expected SOURCE=VALUE with SOURCE one of {', '.join(SOURCES)}")
        out[key] = value(raw)
    return out


def load_rates(paths: list[str]) -> dict:
    """Defaults, overridden by bench JSON outputs (bench_prep: in_MB_per_s per source; bench_tokenize:
    code_only.ours_mb_per_s) or a rates file in this script's own shape
    ({"read": {source: MB/s}, "curate": MB/s, "tokenize": MB/s, "pack": MB/s})."""
    rates = json.loads(json.dumps(DEFAULT_RATES))
    for p in paths or []:
        data = json.loads(Path(p).read_text())
        if data.get("bench") == "prep":
            for row in data["rows"]:
                name = row["source"].split(" ")[0]
                if name in SOURCES and "(" not in row["source"] or row["source"] == "traces (chat template)":
                    rates["read"][name] = float(row["in_MB_per_s"])
        elif "code_only" in data:
            rates["tokenize"] = float(data["code_only"]["ours_mb_per_s"])
        else:
            rates["read"].update(data.get("read", {}))
            for k in ("curate", "tokenize", "pack"):
                if k in data:
                    rates[k] = float(data[k])
    return rates


@dataclass
class Stage:
    source: str
    stage: str
    input_bytes: float
    mb_per_s: float
    disk_bytes: float

    @property
    def core_hours(self) -> float:
        return self.input_bytes / 1e6 / self.mb_per_s / 3600

    def tasks(self, task_hours: float) -> int:
        return max(1, math.ceil(self.core_hours / task_hours))


def plan(inputs: dict[str, float], mixture: dict[str, float], total_tokens: float, rates: dict,
         keep: dict[str, float], bytes_per_token: float, gzip_ratio: float, max_repeat: float) -> dict:
    """Stages per source and the token budget (pure arithmetic, for the printout and the tests)."""
    share_sum = sum(mixture.values())
    stages: list[Stage] = []
    budget = {}
    for src, size in inputs.items():
        kept = size * keep[src]
        tokens_avail = kept / bytes_per_token
        target = total_tokens * mixture.get(src, 0.0) / share_sum if share_sum else 0.0
        budget[src] = {"input_bytes": size, "kept_bytes": kept, "tokens_available": tokens_avail,
                       "tokens_target": target, "repeats": target / tokens_avail if tokens_avail else math.inf}
        used_tokens = min(target, tokens_avail * max_repeat)
        stages += [
            Stage(src, "read", size, rates["read"][src], size * gzip_ratio),
            Stage(src, "curate", size, rates["curate"], kept * gzip_ratio),
            Stage(src, "tokenize", kept, rates["tokenize"], tokens_avail * 4),
            Stage(src, "pack", used_tokens * bytes_per_token, rates["pack"], used_tokens * 4),
        ]
    return {"stages": stages, "budget": budget}


def human(n: float, unit: str = "B") -> str:
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {suffix}{unit}"
    return f"{n:.0f} {unit}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", nargs="+", required=True, help="raw input size per source: repos=3TB ...")
    ap.add_argument("--mixture", nargs="+", required=True, help="token share per source: repos=0.55 ...")
    ap.add_argument("--total-tokens", type=float, required=True, help="tokens of the training run (e.g. 500e9)")
    ap.add_argument("--rates", nargs="*", help="bench JSON outputs or a rates file (see load_rates)")
    ap.add_argument("--keep", nargs="*", help="fraction of input bytes kept by curation per source: repos=0.45")
    ap.add_argument("--bytes-per-token", type=float, default=3.5, help="text bytes per token (code, Qwen3: ~3.5)")
    ap.add_argument("--gzip-ratio", type=float, default=0.3, help="JSONL.gz bytes per text byte")
    ap.add_argument("--max-repeat", type=float, default=4.0, help="mixture.max_repeat: most epochs of a source")
    ap.add_argument("--task-hours", type=float, default=2.0, help="target duration of one task on one core")
    ap.add_argument("--tokens-per-s-per-gpu", type=float, required=True)
    ap.add_argument("--gpus", type=int, required=True)
    args = ap.parse_args(argv)
    try:
        inputs = parse_pairs(args.input, "--input", parse_size)
        mixture = parse_pairs(args.mixture, "--mixture")
        keep = {**DEFAULT_KEEP, **parse_pairs(args.keep, "--keep")}
    except ValueError as e:
        ap.error(str(e))
    missing = sorted(set(mixture) - set(inputs))
    if missing:
        ap.error(f"--mixture names {', '.join(missing)} without an --input size")
    result = plan(inputs, mixture, args.total_tokens, load_rates(args.rates), keep, args.bytes_per_token,
                  args.gzip_ratio, args.max_repeat)

    print(f"{'source':<10} {'stage':<9} {'input':>10} {'MB/s/core':>10} {'core-hours':>11} {'disk':>10} {'--tasks':>8}")
    totals: dict[str, list[float]] = {}
    for s in result["stages"]:
        print(f"{s.source:<10} {s.stage:<9} {human(s.input_bytes):>10} {s.mb_per_s:>10.2f} {s.core_hours:>11,.0f} "
              f"{human(s.disk_bytes):>10} {s.tasks(args.task_hours):>8}")
        t = totals.setdefault(s.stage, [0.0, 0.0])
        t[0] += s.core_hours
        t[1] += s.disk_bytes
    print()
    for stage, (ch, disk) in totals.items():
        print(f"total {stage:<9} {ch:>12,.0f} core-hours  {human(disk):>10} on disk")
    print()
    print(f"{'source':<10} {'target':>10} {'available':>10} {'repeats':>8}")
    for src, b in result["budget"].items():
        flag = "  > max_repeat: the target is capped" if b["repeats"] > args.max_repeat else ""
        print(f"{src:<10} {human(b['tokens_target'], 'tok'):>10} {human(b['tokens_available'], 'tok'):>10} "
              f"{b['repeats']:>8.2f}{flag}")
    hours = args.total_tokens / (args.tokens_per_s_per_gpu * args.gpus) / 3600
    print()
    print(f"training: {human(args.total_tokens, 'tok')} at {args.tokens_per_s_per_gpu:,.0f} tokens/s/GPU on "
          f"{args.gpus} GPUs = {hours:,.1f} hours ({hours / 24:.1f} days, {hours * args.gpus:,.0f} GPU-hours)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
