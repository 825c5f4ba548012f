"""Seed noise and when a delta between two checkpoints counts: a test with the right degrees of freedom.

- Paired (the seeds are shared: the same probe seed, data order and batches on both sides): the per-seed
  differences d_i = b_i - a_i, a 95% Student-t interval mean(d) ± t(0.975, n-1)·sd(d)/√n. A difference only
  when the interval excludes 0. Pairing removes what the two sides share (the probe seed's batches), which an
  unpaired rule counts as noise twice.
- Unpaired (no shared seeds): Welch's t interval, Welch–Satterthwaite degrees of freedom.
- One sample on either side (or a single shared seed): no interval; the report says "one sample, no band".
- A deterministic metric (every difference the same, sd 0) with two or more pairs: any change is real.

:func:`hierarchical_bootstrap` is the pre-registered primary comparison's interval: it resamples midtraining
seeds, probe seeds and held-out documents (each level with replacement, nested) and takes the percentile
interval of the mean difference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95
NO_BAND = "one sample, no band"
RULE = (
    "a delta counts as a difference only when its 95% interval excludes 0: paired over the seeds both sides share "
    "(Student t on the per-seed differences, n-1 degrees of freedom), else Welch's t (unpaired); '≈' marks a delta "
    f"whose interval holds 0; '{NO_BAND}' marks a delta with one sample on a side (no test, no ▲/▼)"
)


@dataclass(frozen=True)
class Spread:
    mean: float
    sd: float  # sample standard deviation (0 for one sample)
    k: int  # samples (seeds)


def spread(samples: Sequence[float]) -> Spread:
    if not samples:
        raise ValueError("no samples")
    k = len(samples)
    mean = sum(samples) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in samples) / (k - 1)) if k > 1 else 0.0
    return Spread(mean, sd, k)


@dataclass(frozen=True)
class Comparison:
    """b minus a: the delta, its interval (None without one), the test, and whether it counts."""

    delta: float
    low: float | None
    high: float | None
    method: str  # "paired t", "Welch t", "bootstrap", or NO_BAND
    n: int  # pairs (paired), or the smaller side's samples
    df: float | None = None

    @property
    def verdict(self) -> bool | None:
        """True: a difference; False: within the interval; None: no test (one sample)."""
        if self.low is None or self.high is None:
            return None
        return not (self.low <= 0.0 <= self.high)

    def to_dict(self) -> dict:
        return {
            "delta": self.delta,
            "low": self.low,
            "high": self.high,
            "method": self.method,
            "n": self.n,
            "df": self.df,
            "difference": self.verdict,
        }


def _t_interval(mean: float, se: float, df: float, level: float) -> tuple[float, float]:
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return mean - half, mean + half


def paired(a: Mapping[str, float], b: Mapping[str, float], level: float = LEVEL) -> Comparison:
    """b - a over the keys (seeds) both share."""
    keys = sorted(set(a) & set(b))
    if not keys:
        raise ValueError("paired: no shared seeds")
    d = [b[k] - a[k] for k in keys]
    s = spread(d)
    if s.k < 2:
        return Comparison(s.mean, None, None, NO_BAND, s.k)
    if s.sd == 0.0:  # deterministic: every pair differs by the same amount
        return Comparison(s.mean, s.mean, s.mean, "paired t", s.k, s.k - 1)
    low, high = _t_interval(s.mean, s.sd / math.sqrt(s.k), s.k - 1, level)
    return Comparison(s.mean, low, high, "paired t", s.k, s.k - 1)


def welch(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Comparison:
    """b - a, unpaired: Welch's t interval."""
    sa, sb = spread(a), spread(b)
    delta = sb.mean - sa.mean
    if sa.k < 2 or sb.k < 2:
        return Comparison(delta, None, None, NO_BAND, min(sa.k, sb.k))
    va, vb = sa.sd**2 / sa.k, sb.sd**2 / sb.k
    if va + vb == 0.0:
        return Comparison(delta, delta, delta, "Welch t", min(sa.k, sb.k), sa.k + sb.k - 2)
    df = (va + vb) ** 2 / (va**2 / (sa.k - 1) + vb**2 / (sb.k - 1))
    low, high = _t_interval(delta, math.sqrt(va + vb), df, level)
    return Comparison(delta, low, high, "Welch t", min(sa.k, sb.k), df)


def compare(
    a: Sequence[float], b: Sequence[float], a_keys: Sequence[str] | None = None, b_keys: Sequence[str] | None = None
) -> Comparison:
    """Paired when both sides name their seeds and share two or more, else Welch; one sample: no band."""
    if a_keys is not None and b_keys is not None and len(set(a_keys) & set(b_keys)) >= 2:
        return paired(dict(zip(a_keys, a)), dict(zip(b_keys, b)))
    return welch(a, b)


def is_difference(a: list[float], b: list[float]) -> bool | None:
    """Whether b's mean differs from a's beyond seed noise (unpaired: Welch), or None with one sample a side."""
    return welch(a, b).verdict


def hierarchical_bootstrap(
    base: np.ndarray, arm: np.ndarray, reps: int = 4000, seed: int = 0, level: float = LEVEL
) -> Comparison:
    """arm - base, mean over everything, with a nested percentile bootstrap interval.

    ``arm``: [midtraining seed, probe seed, held-out document]; ``base``: [probe seed, held-out document] (no
    midtraining: one start). Probe seeds and documents are shared, so each replicate draws one set of probe seeds
    and one set of documents for both sides (paired), and midtraining seeds for the arm."""
    base, arm = np.asarray(base, float), np.asarray(arm, float)
    if arm.ndim != 3 or base.ndim != 2 or arm.shape[1:] != base.shape:
        raise ValueError(f"hierarchical_bootstrap: arm {arm.shape} must be [M, P, T] over base {base.shape} [P, T]")
    m, p, t = arm.shape
    delta = float(arm.mean() - base.mean())
    if m < 2 and p < 2 and t < 2:
        return Comparison(delta, None, None, NO_BAND, 1)
    rng = np.random.default_rng(seed)
    out = np.empty(reps)
    for r in range(reps):
        mi, pi, ti = rng.integers(0, m, m), rng.integers(0, p, p), rng.integers(0, t, t)
        out[r] = arm[np.ix_(mi, pi, ti)].mean() - base[np.ix_(pi, ti)].mean()
    low, high = np.quantile(out, [(1 - level) / 2, (1 + level) / 2])
    return Comparison(delta, float(low), float(high), "bootstrap", m)
