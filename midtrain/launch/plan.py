"""Plan a data-prep + training run before spending it: core-hours, disk and --tasks per stage, training time.

From per-core rates (MB/s of input per core, measured with bench/bench_prep.py, bench/bench_curate_speed.py and
bench/bench_tokenize.py), the input size per source and a target mixture, :func:`plan` gives per source and
stage (read, curate, tokenize, pack):

- core-hours (input MB / (MB/s per core) / 3600),
- disk written by the stage (raw and curated JSONL.gz, tokenized cache and shards at 4 bytes per token),
- a suggested ``--tasks`` so that one task runs about ``task_hours`` on one core (and a pack task holds at
  most PACK_TOKENS_PER_TASK tokens), summed up as the prep and pack command lines to run,

and per source the tokens available after curation against the mixture's target (repeats needed, and
whether ``max_repeat`` caps it); :func:`training_hours` gives the training time at a tokens/s/GPU.

Every figure is a model, not a measurement: it is as good as the rates (measure them on your nodes) and the
assumed fractions (bytes kept by curation, bytes per token, gzip ratio).
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from midtrain.formats.source_specs import SOURCE_TRAITS

SOURCES = tuple(SOURCE_TRAITS)  # prep names
STAGES = ("read", "curate", "tokenize", "pack")

# MB/s of input per core, measured on a shared, loaded 2-core x86 VM (2026-11): readers with
# bench/bench_prep.py (traces with the chat template), tokenization with bench/bench_tokenize.py (Qwen3, code);
# curation is bench/bench_curate_speed.py's full-curation figure for its slowest source (3.0 MB/s per core,
# every step on; 3.0-4.7 across sources). Packing is
# not CPU-bound (it copies token ids into shards): 50 MB/s of text per core is an assumption, not a
# measurement. Measure on your own nodes and pass the JSON outputs (`midtrain plan --rates`).
DEFAULT_RATES: dict = {
    "read": {name: t.plan_read_mb_s for name, t in SOURCE_TRAITS.items()},  # each source's registration
    "curate": 3.0,
    "tokenize": 1.26,
    "pack": 50.0,
}
# fraction of a source's input bytes that curation keeps (filters, dedup, license): assumptions to override
DEFAULT_KEEP = {name: t.plan_keep for name, t in SOURCE_TRAITS.items()}
# A pack task holds its share's piece table in memory: a few billion tokens per task (README, "Scale").
PACK_TOKENS_PER_TASK = 2e9
UNITS = {
    "": 1,
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "PB": 1e15,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
TOKEN_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


@dataclass(frozen=True)
class Size:
    """An input size: bytes, or tokens (converted to bytes at the plan's bytes per token)."""

    value: float
    tokens: bool = False

    def bytes(self, bytes_per_token: float) -> float:
        return self.value * bytes_per_token if self.tokens else self.value


def parse_size(text: str) -> Size:
    """'3TB', '200GB', '1.5e12' -> bytes; '100Gtok', '5e9tok' -> tokens."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2) if m else ""
    try:
        number = float(m.group(1)) if m else None
    except ValueError:
        number = None
    if number is not None and unit.lower().endswith(("tok", "tokens")):
        prefix = unit[: -len("tokens") if unit.lower().endswith("tokens") else -3].upper()
        if prefix in TOKEN_UNITS:
            return Size(number * TOKEN_UNITS[prefix], tokens=True)
    if number is None or unit.upper() not in UNITS:
        raise ValueError(
            f"size {text!r}: expected a number with an optional unit (KB, MB, GB, TB, PB, GiB ...) "
            "or tokens (5e9tok, 100Gtok)"
        )
    return Size(number * UNITS[unit.upper()])


def parse_pairs(items: list[str] | None, what: str, value=float, keys=SOURCES) -> dict:
    """['repos=0.5', ...] -> {'repos': 0.5}; a bad item raises ValueError naming the option and the item."""
    out = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or key not in keys:
            raise ValueError(f"{what} {item!r}: expected KEY=VALUE with KEY one of {', '.join(keys)}")
        try:
            out[key] = value(raw)
        except ValueError as e:
            raise ValueError(f"{what} {item!r}: {e}") from None
    return out


def _rates_from(data: dict, path: str, rates: dict) -> None:
    """Apply one bench JSON output (or a rates file in DEFAULT_RATES's shape) to ``rates``."""
    if data.get("bench") == "prep":  # bench_prep.py: rows of source, in_MB_per_s (one core)
        for row in data["rows"]:
            name = row["source"].split(" ")[0]
            if name in SOURCES and "(" not in row["source"] or row["source"] == "traces (chat template)":
                rates["read"][name] = float(row["in_MB_per_s"])
    elif data and all(isinstance(r, dict) and "full_mb_per_s_core" in r for r in data.values()):
        # bench_curate_speed.py: full curation per source; one curation rate, the slowest source's
        rates["curate"] = min(float(r["full_mb_per_s_core"]) for r in data.values())
    elif "code_only" in data:  # bench_tokenize.py
        rates["tokenize"] = float(data["code_only"]["ours_mb_per_s"])
    elif set(data) & set(STAGES):
        unknown = set(data.get("read", {})) - set(SOURCES)
        if unknown:
            raise ValueError(f"{path}: read rates for unknown sources {sorted(unknown)}")
        rates["read"].update({k: float(v) for k, v in data.get("read", {}).items()})
        rates.update({k: float(data[k]) for k in STAGES[1:] if k in data})
    else:
        raise ValueError(
            f"{path}: not a bench_prep.py, bench_curate_speed.py or bench_tokenize.py --json output, "
            f"nor a rates file with keys {', '.join(STAGES)}"
        )


def load_rates(paths: list[str] | None = None, overrides: dict[str, float] | None = None) -> dict:
    """DEFAULT_RATES, then each bench JSON output in ``paths``, then ``overrides`` (a source name sets its read
    rate; curate, tokenize or pack sets that stage's)."""
    rates = copy.deepcopy(DEFAULT_RATES)
    for p in paths or []:
        _rates_from(json.loads(Path(p).read_text()), p, rates)
    for key, value in (overrides or {}).items():
        if key in SOURCES:
            rates["read"][key] = value
        else:
            rates[key] = value
    bad = [k for k, v in [*rates["read"].items(), *((s, rates[s]) for s in STAGES[1:])] if not v > 0]
    if bad:
        raise ValueError(f"rates must be positive MB/s per core: {', '.join(bad)}")
    return rates


@dataclass
class Stage:
    source: str
    stage: str
    input_bytes: float
    mb_per_s: float
    disk_bytes: float
    min_tasks: int = 1  # pack: enough tasks that each holds at most PACK_TOKENS_PER_TASK

    @property
    def core_hours(self) -> float:
        return self.input_bytes / 1e6 / self.mb_per_s / 3600

    def tasks(self, task_hours: float) -> int:
        return max(self.min_tasks, math.ceil(self.core_hours / task_hours))


@dataclass
class Budget:
    input_bytes: float
    kept_bytes: float
    tokens_available: float
    tokens_target: float

    @property
    def repeats(self) -> float:
        return self.tokens_target / self.tokens_available if self.tokens_available else math.inf


@dataclass
class Plan:
    stages: list[Stage] = field(default_factory=list)
    budget: dict[str, Budget] = field(default_factory=dict)

    def commands(self, task_hours: float) -> list[str]:
        """The --tasks to give: one prep run per source (read and curate share its tasks), one pack run
        (tokenize_tasks per input, tasks over all sources)."""
        hours: dict[str, float] = {}
        tokenize, pack = 1, 0
        for s in self.stages:
            if s.stage in ("read", "curate"):
                hours[s.source] = hours.get(s.source, 0.0) + s.core_hours
            elif s.stage == "tokenize":
                tokenize = max(tokenize, s.tasks(task_hours))
            else:
                pack += s.tasks(task_hours)
        lines = [f"midtrain prep {src} ... --tasks {max(1, math.ceil(h / task_hours))}" for src, h in hours.items()]
        return lines + [f"midtrain pack ... tokenize_tasks={tokenize} tasks={max(pack, 1)}"]

    def totals(self) -> dict[str, tuple[float, float]]:
        """Per stage: (core-hours, disk bytes) summed over the sources."""
        out: dict[str, tuple[float, float]] = {}
        for s in self.stages:
            ch, disk = out.get(s.stage, (0.0, 0.0))
            out[s.stage] = (ch + s.core_hours, disk + s.disk_bytes)
        return out


def plan(
    inputs: dict[str, Size],
    mixture: dict[str, float],
    total_tokens: float,
    rates: dict,
    keep: dict[str, float],
    bytes_per_token: float = 3.5,
    gzip_ratio: float = 0.3,
    max_repeat: float = 4.0,
) -> Plan:
    """Stages per source and the token budget (pure arithmetic)."""
    missing = sorted(set(mixture) - set(inputs))
    if missing:
        raise ValueError(f"--mixture names {', '.join(missing)} without an --input size")
    share_sum = sum(mixture.values())
    result = Plan()
    for src, size in inputs.items():
        raw = size.bytes(bytes_per_token)
        kept = raw * keep[src]
        tokens_avail = kept / bytes_per_token
        target = total_tokens * mixture.get(src, 0.0) / share_sum if share_sum else 0.0
        result.budget[src] = Budget(raw, kept, tokens_avail, target)
        used_tokens = min(target, tokens_avail * max_repeat)
        result.stages += [
            Stage(src, "read", raw, rates["read"][src], raw * gzip_ratio),
            Stage(src, "curate", raw, rates["curate"], kept * gzip_ratio),
            Stage(src, "tokenize", kept, rates["tokenize"], tokens_avail * 4),
            Stage(
                src,
                "pack",
                used_tokens * bytes_per_token,
                rates["pack"],
                used_tokens * 4,
                min_tasks=max(1, math.ceil(used_tokens / PACK_TOKENS_PER_TASK)),
            ),
        ]
    return result


def training_hours(total_tokens: float, tokens_per_s_per_gpu: float, gpus: int) -> float:
    return total_tokens / (tokens_per_s_per_gpu * gpus) / 3600


def human(n: float, unit: str = "B") -> str:
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {suffix}{unit}"
    return f"{n:.0f} {unit}"


def format_plan(result: Plan, task_hours: float, max_repeat: float) -> str:
    """The stage table, the per-stage totals and the token budget as text."""
    lines = [
        f"{'source':<10} {'stage':<9} {'input':>10} {'MB/s/core':>10} {'core-hours':>11} {'disk':>10} {'--tasks':>8}"
    ]
    for s in result.stages:
        lines.append(
            f"{s.source:<10} {s.stage:<9} {human(s.input_bytes):>10} {s.mb_per_s:>10.2f} "
            f"{s.core_hours:>11,.0f} {human(s.disk_bytes):>10} {s.tasks(task_hours):>8}"
        )
    lines.append("")
    for stage, (ch, disk) in result.totals().items():
        lines.append(f"total {stage:<9} {ch:>12,.0f} core-hours  {human(disk):>10} on disk")
    lines += ["", f"{'source':<10} {'target':>10} {'available':>10} {'repeats':>8}"]
    for src, b in result.budget.items():
        flag = "  > max_repeat: the target is capped" if b.repeats > max_repeat else ""
        lines.append(
            f"{src:<10} {human(b.tokens_target, 'tok'):>10} {human(b.tokens_available, 'tok'):>10} "
            f"{b.repeats:>8.2f}{flag}"
        )
    lines += [
        "",
        f"suggested (one task about {task_hours:g} core-hours; a pack task at most "
        f"{human(PACK_TOKENS_PER_TASK, 'tok')}):",
    ]
    return "\n".join(lines + ["  " + c for c in result.commands(task_hours)])
