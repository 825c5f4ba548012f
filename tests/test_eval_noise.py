"""The seed-noise tests: paired t over shared seeds, Welch's t otherwise, no verdict with one sample, and the
nested bootstrap of the pre-registered primary comparison; their coverage on known distributions."""

from __future__ import annotations

import numpy as np
import pytest

from midtrain.eval.noise import NO_BAND, compare, hierarchical_bootstrap, is_difference, paired, spread, welch


def test_spread_is_mean_and_sample_sd():
    s = spread([1.0, 2.0, 3.0])
    assert (s.mean, s.sd, s.k) == (2.0, 1.0, 3)
    assert spread([5.0]).sd == 0.0


def test_paired_interval_is_student_t_with_n_minus_1_degrees_of_freedom():
    a = {"s1": 1.0, "s2": 2.0, "s3": 3.0}
    b = {"s1": 1.5, "s2": 2.7, "s3": 3.4, "unshared": 9.0}
    c = paired(a, b)
    d = np.array([0.5, 0.7, 0.4])
    half = 4.302652729911275 * d.std(ddof=1) / np.sqrt(3)  # t(0.975, 2)
    assert c.n == 3 and c.df == 2 and c.method == "paired t"
    assert c.low == pytest.approx(d.mean() - half) and c.high == pytest.approx(d.mean() + half)
    assert c.verdict is True


def test_paired_detects_a_shift_on_correlated_data_that_the_unpaired_test_calls_noise():
    rng = np.random.default_rng(1)
    seed_effect = rng.normal(0, 0.05, 8)  # what the shared probe seed does to both sides (large)
    a = 2.0 + seed_effect + rng.normal(0, 0.002, 8)
    b = a - 0.01 + rng.normal(0, 0.002, 8)  # midtraining helps by 0.01, far below the seed effect
    keys = [f"s{i}" for i in range(8)]
    assert compare(list(a), list(b), keys, keys).verdict is True
    assert compare(list(a), list(b)).verdict is False  # unpaired: the seed effect swamps it
    assert welch(list(a), list(b)).method == "Welch t"


def test_one_sample_gives_no_verdict_and_zero_noise_counts_any_change():
    assert is_difference([1.0], [5.0]) is None
    assert welch([1.0], [5.0]).method == NO_BAND
    assert paired({"s": 1.0}, {"s": 2.0}).verdict is None
    assert is_difference([1.0, 1.0], [1.0, 1.0]) is False
    assert is_difference([1.0, 1.0], [1.001, 1.001]) is True  # deterministic metric: any change is real
    with pytest.raises(ValueError, match="no shared seeds"):
        paired({"a": 1.0}, {"b": 1.0})


@pytest.mark.parametrize("test", ["paired", "welch"])
def test_95_percent_intervals_cover_the_true_difference_about_95_percent_of_the_time(test):
    """Known distributions, small samples (k=4): coverage within binomial error of 95% (2,000 draws; a rule
    with the wrong degrees of freedom, e.g. ±2 standard errors at k=4, covers ~86%)."""
    rng = np.random.default_rng(7)
    covered, draws = 0, 2000
    for _ in range(draws):
        a = rng.normal(1.0, 0.1, 4)
        b = (a + 0.03 + rng.normal(0, 0.05, 4)) if test == "paired" else rng.normal(1.03, 0.2, 4)
        keys = ["p", "q", "r", "s"]
        c = compare(list(a), list(b), keys, keys) if test == "paired" else compare(list(a), list(b))
        assert c.low is not None and c.high is not None
        covered += c.low <= 0.03 <= c.high
    assert 0.93 <= covered / draws <= 0.97


def test_false_positive_rate_under_the_null_is_at_most_5_percent_where_two_se_gave_18():
    rng = np.random.default_rng(3)
    draws = [(rng.normal(0, 1, 2), rng.normal(0, 1, 2)) for _ in range(3000)]
    keys = ["s1", "s2"]
    pair = sum(bool(compare(list(a), list(b), keys, keys).verdict) for a, b in draws) / len(draws)
    unpaired = sum(bool(welch(list(a), list(b)).verdict) for a, b in draws) / len(draws)
    two_se = sum(abs(b.mean() - a.mean()) > 2 * np.sqrt(a.var(ddof=1) / 2 + b.var(ddof=1) / 2) for a, b in draws)
    assert 0.035 <= pair <= 0.065 and unpaired <= 0.065  # Welch is conservative at k=2
    assert two_se / len(draws) > 0.14  # the old |Δ| > 2·SE rule


def test_hierarchical_bootstrap_covers_and_is_paired_over_probe_seeds_and_documents():
    rng = np.random.default_rng(11)
    covered, draws = 0, 150
    for _ in range(draws):
        doc = rng.normal(2.0, 0.3, 6)  # documents differ a lot, on both sides alike
        probe = rng.normal(0, 0.05, 2)
        base = doc[None, :] + probe[:, None] + rng.normal(0, 0.01, (2, 6))
        mid = rng.normal(-0.02, 0.01, 5)  # the midtraining seeds' effects, true mean -0.02
        arm = base[None] + mid[:, None, None] + rng.normal(0, 0.01, (5, 2, 6))
        c = hierarchical_bootstrap(base, arm, reps=400, seed=int(rng.integers(1 << 30)))
        assert c.low is not None and c.high is not None
        covered += c.low <= -0.02 <= c.high
    assert covered / draws >= 0.85  # percentile bootstrap with 5 seeds: a little under nominal
    with pytest.raises(ValueError, match=r"must be \[M, P, T\]"):
        hierarchical_bootstrap(np.zeros((2, 3)), np.zeros((4, 2, 5)))
    one = hierarchical_bootstrap(np.zeros((1, 1)), np.ones((1, 1, 1)))
    assert one.verdict is None and one.method == NO_BAND


def test_report_shows_mean_spread_and_within_noise(tmp_path):
    import json

    from midtrain.eval.report import write_report

    def probe(root, seed, loss):
        d = root / ("sft" if seed is None else f"sft-s{seed}")
        d.mkdir(parents=True)
        (d / "sft_result.json").write_text(json.dumps({"recipe": "p", "probe_sha": "x", "heldout_loss": loss}))

    for name, losses in {"base": [2.0, 2.2], "near": [1.95, 2.25], "far": [1.0, 1.1]}.items():
        probe(tmp_path / name, None, losses[0])
        probe(tmp_path / name, 7, losses[1])
    # the seeds are the ones the run's config names (steps), never the directories that happen to lie there
    (tmp_path / "base" / "sft-s9").mkdir()
    runs = {n: tmp_path / n for n in ("base", "near", "far")}
    md = write_report(runs, tmp_path / "r", "base", steps=["sft", "sft-s7"]).read_text()
    row = next(line for line in md.splitlines() if line.startswith("| held-out loss, assistant tokens"))
    assert "2.100 ± 0.141 (k=2)" in row  # base mean ± sd
    assert "(+0.000 ≈)" in row  # paired differences -0.05 and +0.05: the interval holds 0
    assert "(-1.050 ▲)" in row  # paired differences -1.0 and -1.1: t(0.975, 1) interval excludes 0
    assert "Seed noise:" in md and "paired over the seeds both sides share" in md
