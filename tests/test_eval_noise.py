"""The seed-noise rule: a delta is a difference only beyond twice the standard error of the two seed means."""

from __future__ import annotations

import math

import pytest

from midtrain.eval.noise import Z, is_difference, spread


def test_spread_is_mean_and_sample_sd():
    s = spread([1.0, 2.0, 3.0])
    assert (s.mean, s.sd, s.k) == (2.0, 1.0, 3)
    assert spread([5.0]).sd == 0.0


@pytest.mark.parametrize("k", [2, 3, 5])
def test_marks_a_difference_only_beyond_the_spread(k):
    a = [1.0 + 0.1 * i for i in range(k)]  # spread 0.1 steps
    sa = spread(a)
    se = math.sqrt(2 * sa.sd**2 / k)  # b below has the same spread
    threshold = Z * se
    for factor, expected in [(0.5, False), (0.99, False), (1.01, True), (3.0, True)]:
        b = [x + factor * threshold for x in a]
        assert is_difference(a, b) is expected, (factor, threshold)
        assert is_difference(b, a) is expected  # symmetric


def test_one_seed_gives_no_verdict_and_zero_noise_counts_any_change():
    assert is_difference([1.0], [5.0]) is None
    assert is_difference([1.0, 1.0], [1.0, 1.0]) is False
    assert is_difference([1.0, 1.0], [1.001, 1.001]) is True  # deterministic metric: any change is real


def test_report_shows_mean_spread_and_within_noise(tmp_path):
    import json

    from midtrain.eval.report import write_report

    def probe(root, seed, loss):
        d = root / ("sft" if seed is None else f"sft-s{seed}")
        d.mkdir(parents=True)
        (d / "sft_result.json").write_text(json.dumps({"recipe": "p", "probe_sha": "x", "heldout_loss": loss}))

    for name, losses in {"base": [2.0, 2.2], "near": [1.95, 2.15], "far": [1.0, 1.1]}.items():
        probe(tmp_path / name, None, losses[0])
        probe(tmp_path / name, 7, losses[1])
    # the seeds are the ones the run's config names (steps), never the directories that happen to lie there
    (tmp_path / "base" / "sft-s9").mkdir()
    runs = {n: tmp_path / n for n in ("base", "near", "far")}
    md = write_report(runs, tmp_path / "r", "base", steps=["sft", "sft-s7"]).read_text()
    row = next(line for line in md.splitlines() if line.startswith("| held-out loss, assistant tokens"))
    assert "2.100 ± 0.141 (k=2)" in row  # base mean ± sd
    assert "(-0.050 ≈)" in row  # within the seed noise
    assert "(-1.050 ▲)" in row  # beyond it
    assert "Seed noise:" in md and "2·√(sd_a²/k_a + sd_b²/k_b)" in md
