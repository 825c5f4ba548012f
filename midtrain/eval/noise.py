"""Seed noise: mean ± spread of a metric over K seeds, and when a delta between two checkpoints counts.

The rule (stated in every report that uses it): with at least two seeds on both sides, a delta is a
difference only when |mean_b - mean_a| > 2 x sqrt(sd_a²/k_a + sd_b²/k_b), i.e. more than twice the standard
error of the difference of the two means (sd = sample standard deviation over seeds, k = seeds). Otherwise
it is within seed noise. With a single seed on either side the noise is unknown and no verdict is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z = 2.0  # standard errors a delta must exceed
RULE = (
    "a delta counts as a difference only when |Δ mean| > 2·√(sd_a²/k_a + sd_b²/k_b) — twice the standard "
    "error of the difference over the k seeds of each side (sd: sample standard deviation); "
    "'≈' marks a delta within seed noise; with one seed the noise is unknown"
)


@dataclass(frozen=True)
class Spread:
    mean: float
    sd: float  # sample standard deviation (0 for one sample)
    k: int  # samples (seeds)


def spread(samples: list[float]) -> Spread:
    if not samples:
        raise ValueError("no samples")
    k = len(samples)
    mean = sum(samples) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in samples) / (k - 1)) if k > 1 else 0.0
    return Spread(mean, sd, k)


def noise(a: Spread, b: Spread) -> float | None:
    """Standard error of ``b.mean - a.mean``; None when either side has fewer than two seeds."""
    if a.k < 2 or b.k < 2:
        return None
    return math.sqrt(a.sd**2 / a.k + b.sd**2 / b.k)


def is_difference(a: list[float], b: list[float]) -> bool | None:
    """Whether b's mean differs from a's beyond seed noise (True/False), or None when the noise is unknown."""
    sa, sb = spread(a), spread(b)
    se = noise(sa, sb)
    if se is None:
        return None
    return abs(sb.mean - sa.mean) > Z * se
