"""Do base-model proxy metrics rank checkpoints the way the probe does? Rank correlation across a sweep.

The recipe evaluates checkpoints by a short fixed SFT (the probe) because proxy metrics measured on the base
model did not order checkpoints as post-training did. For each proxy metric this module measures that on a
user's own sweep: Spearman's rho and Kendall's tau-b between the proxy's order and the probe's order of the
checkpoints (both turned into "better is higher"), an interval from the seeds, and whether the proxy's pick
is the probe's winner.

Interval: each replicate draws, for every checkpoint, its seeds with replacement (probe and proxy alike) and
takes their mean; the interval is the 2.5th..97.5th percentile of the correlation over the replicates. A
checkpoint with one seed contributes its one value, so with one seed everywhere there is no interval.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

MIN_CHECKPOINTS = 3  # below this a rank correlation is only ±1
REPLICATES = 1000


def _ranks(xs: list[float]) -> list[float]:
    """Average ranks (ties share the mean of their positions), 1-based."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _pearson(a: list[float], b: list[float]) -> float | None:
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va, vb = sum((x - ma) ** 2 for x in a), sum((y - mb) ** 2 for y in b)
    if va == 0 or vb == 0:
        return None  # one side ranks every checkpoint equal: no order to correlate
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / math.sqrt(va * vb)


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rho (Pearson on average ranks, so ties are handled); None when either side is constant."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"spearman: need two equal-length lists of >= 2 values, got {len(x)} and {len(y)}")
    return _pearson(_ranks(x), _ranks(y))


def kendall(x: list[float], y: list[float]) -> float | None:
    """Kendall's tau-b (ties on either side corrected); None when either side is constant."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"kendall: need two equal-length lists of >= 2 values, got {len(x)} and {len(y)}")
    conc = disc = tx = ty = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return (conc - disc) / denom if denom else None


@dataclass
class Agreement:
    proxy: str  # "group/metric" of the proxy row
    checkpoints: list[str]  # those with both a probe and a proxy value
    spearman: float | None = None
    kendall: float | None = None
    spearman_interval: tuple[float, float] | None = None
    kendall_interval: tuple[float, float] | None = None
    probe_pick: str | None = None
    proxy_pick: str | None = None
    note: str = ""
    seeds: dict[str, int] = field(default_factory=dict)  # checkpoint -> seeds on the probe side

    @property
    def same_pick(self) -> bool | None:
        return None if self.proxy_pick is None or self.probe_pick is None else self.proxy_pick == self.probe_pick

    def to_dict(self) -> dict[str, Any]:
        return {
            "proxy": self.proxy,
            "checkpoints": self.checkpoints,
            "spearman": self.spearman,
            "kendall": self.kendall,
            "spearman_interval": self.spearman_interval,
            "kendall_interval": self.kendall_interval,
            "probe_pick": self.probe_pick,
            "proxy_pick": self.proxy_pick,
            "same_pick": self.same_pick,
            "note": self.note,
        }


def _goodness(row: Any, name: str, samples: bool = False) -> Any:
    sign = 1.0 if row.higher_is_better else -1.0
    if samples:
        return [sign * v for v in (row.samples.get(name) or [row.values[name]])]
    return sign * row.values[name]


def _pick(row: Any, names: list[str]) -> str | None:
    """The best checkpoint by a row's means; None on a tie for first."""
    vals = sorted(((_goodness(row, n), n) for n in names), reverse=True)
    return None if len(vals) > 1 and vals[0][0] == vals[1][0] else vals[0][1]


def _percentiles(xs: list[float]) -> tuple[float, float] | None:
    if not xs:
        return None
    xs = sorted(xs)
    lo, hi = xs[int(0.025 * (len(xs) - 1))], xs[int(math.ceil(0.975 * (len(xs) - 1)))]
    return (round(lo, 4), round(hi, 4))


def agreement(target: Any, proxy: Any, seed: int = 0, replicates: int = REPLICATES) -> Agreement:
    """How well PROXY's order of the checkpoints matches TARGET's (both eval.report.Row)."""
    key = f"{proxy.group}/{proxy.metric}"
    names = [n for n in target.values if target.values.get(n) is not None and proxy.values.get(n) is not None]
    out = Agreement(key, names, seeds={n: len(target.samples.get(n) or [1]) for n in names})
    if len(names) < MIN_CHECKPOINTS:
        out.note = f"needs >= {MIN_CHECKPOINTS} checkpoints with both values (has {len(names)})"
        return out
    t = [_goodness(target, n) for n in names]
    p = [_goodness(proxy, n) for n in names]
    out.spearman, out.kendall = spearman(p, t), kendall(p, t)
    out.probe_pick, out.proxy_pick = _pick(target, names), _pick(proxy, names)
    ts = [_goodness(target, n, samples=True) for n in names]
    ps = [_goodness(proxy, n, samples=True) for n in names]
    if all(len(s) < 2 for s in ts + ps):
        out.note = "one seed per checkpoint: no interval"
        return out
    rng = random.Random(seed)
    rhos, taus = [], []
    for _ in range(replicates):
        tb = [sum(rng.choice(s) for _ in s) / len(s) for s in ts]
        pb = [sum(rng.choice(s) for _ in s) / len(s) for s in ps]
        rho, tau = spearman(pb, tb), kendall(pb, tb)
        if rho is not None:
            rhos.append(rho)
        if tau is not None:
            taus.append(tau)
    out.spearman_interval, out.kendall_interval = _percentiles(rhos), _percentiles(taus)
    return out


def proxy_agreements(rows: list[Any], target_key: str, seed: int = 0) -> list[Agreement]:
    """One Agreement per proxy row (groups starting "Proxy") against the row named TARGET_KEY."""
    target = next((r for r in rows if f"{r.group}/{r.metric}" == target_key), None)
    if target is None:
        return []
    return [agreement(target, r, seed) for r in rows if r.group.startswith("Proxy")]


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:+.2f}"


def _interval(iv: tuple[float, float] | None) -> str:
    return "" if iv is None else f" [{iv[0]:+.2f}, {iv[1]:+.2f}]"


def markdown(agreements: list[Agreement], target_key: str) -> list[str]:
    """The report section: one line per proxy, and which proxies would have picked another winner."""
    if not agreements:
        return []
    md = [
        "## Do the proxies rank like the probe?",
        "",
        f"Rank correlation of each base-model proxy with **{target_key}** across the checkpoints (both oriented "
        "so that +1 = the proxy orders the checkpoints exactly as the probe does, -1 = reversed), with a 95% "
        "interval from resampling each checkpoint's seeds; *pick* is the checkpoint the proxy would have "
        "chosen.",
        "",
        "| proxy | checkpoints | Spearman ρ | Kendall τ | proxy's pick | probe's pick | same winner |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in agreements:
        same = {True: "yes", False: "**no**", None: "—"}[a.same_pick]
        md.append(
            f"| {a.proxy} | {len(a.checkpoints)} | {_num(a.spearman)}{_interval(a.spearman_interval)} | "
            f"{_num(a.kendall)}{_interval(a.kendall_interval)} | {a.proxy_pick or '—'} | "
            f"{a.probe_pick or '—'} | {same}{' (' + a.note + ')' if a.note else ''} |"
        )
    wrong = [a for a in agreements if a.same_pick is False]
    md.append("")
    for a in wrong:
        md.append(
            f"- Choosing by **{a.proxy}** would have picked **{a.proxy_pick}**, not the probe's **{a.probe_pick}**."
        )
    if wrong:
        md.append("")
    return md
