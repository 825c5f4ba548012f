"""The sweep's pre-registered primary comparison (one arm over midtraining seeds, paired over probe seeds and
held-out trajectories, a nested bootstrap interval) and its zero-LR null arm, read from real result files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from midtrain.config import ConfigError
from midtrain.eval.results import load_checkpoint_results
from midtrain.sweep.primary import null_check, null_markdown, primary_comparison, primary_markdown
from midtrain.sweep_config import SweepConfig, Variant

PROBES = ("sft", "sft-s4322")
DOCS = ("astropy__astropy-7166", "django__django-11163", "sympy__sympy-13372")


def _write(root, name, losses):
    """losses: [probe seed][document] -> one checkpoint's probe results."""
    for probe, row in zip(PROBES, losses):
        d = root / name / probe
        d.mkdir(parents=True)
        per = dict(zip(DOCS, map(float, row)))
        (d / "sft_result.json").write_text(
            json.dumps(
                {"recipe": "p", "probe_sha": "x", "heldout_loss": float(np.mean(row)), "heldout_per_document": per}
            )
        )
    return load_checkpoint_results(name, root / name, steps=list(PROBES))  # the seeds the config names


def _cfg(**kw) -> SweepConfig:
    variants = {f"mid.s{i}": Variant(seed=100 + i) for i in range(4)} | {"null": Variant(train=["optim.lr=0"])}
    return SweepConfig(inputs={"repos": "x"}, variants=variants, **kw)


def test_primary_is_paired_over_probe_seeds_and_documents_with_an_interval(tmp_path):
    rng = np.random.default_rng(0)
    base = 2.0 + rng.normal(0, 0.3, (2, 3))  # trajectories differ a lot; both sides share that
    results = [_write(tmp_path, "base", base)]
    for i in range(4):
        results.append(_write(tmp_path, f"mid.s{i}", base - 0.05 + rng.normal(0, 0.005, (2, 3))))
    cfg = _cfg(baseline="base", primary=[f"mid.s{i}" for i in range(4)], primary_about="midtraining lowers it")
    p = primary_comparison(cfg, results)
    assert p is not None
    assert p["status"] == "ok" and p["midtraining_seeds"] == 4 and p["probe_seeds"] == list(PROBES)
    assert p["documents"] == list(DOCS)
    boot, t = p["bootstrap"], p["t_over_midtraining_seeds"]
    assert boot["low"] < boot["delta"] < boot["high"] < 0 and boot["difference"] is True
    assert t["df"] == 3 and t["high"] < 0
    md = "\n".join(primary_markdown(p))
    assert "Primary comparison (pre-registered)" in md and "midtraining is better than the baseline" in md

    same = [_write(tmp_path / "null", "base", base)] + [
        _write(tmp_path / "null", f"mid.s{i}", base + rng.normal(0, 0.02, (2, 3))) for i in range(4)
    ]
    q = primary_comparison(cfg, same)
    assert q is not None
    assert q["bootstrap"]["low"] < 0 < q["bootstrap"]["high"]
    assert "the interval holds 0" in "\n".join(primary_markdown(q))


def test_null_arm_must_equal_the_baseline_exactly(tmp_path):
    base = np.full((2, 3), 2.1640016)
    results = [_write(tmp_path, "base", base), _write(tmp_path, "null", base)]
    cfg = _cfg(baseline="base", null_arm="null")
    ok = null_check(cfg, results)
    assert ok is not None
    assert ok["equal"] and "exactly" in null_markdown(ok)[0]
    off = base.copy()
    off[1, 2] += 1e-7
    bad = null_check(cfg, [results[0], _write(tmp_path / "b", "null", off)])
    assert bad is not None
    assert not bad["equal"] and bad["diffs"] == [f"sft-s4322/{DOCS[2]}: {float(base[1, 2])!r} vs {float(off[1, 2])!r}"]
    assert "NULL ARM FAILED" in null_markdown(bad)[0]


@pytest.mark.parametrize(
    "kw, field",
    [({"primary": ["nope"]}, "primary"), ({"null_arm": "nope"}, "primary"), ({"primary": ["mid.s0", "null"]}, None)],
)
def test_the_primary_names_variants_of_distinct_seeds(kw, field):
    cfg = _cfg(**kw)
    if field is None:  # null has the sweep's seed, mid.s0 its own: distinct
        cfg.check()
        with pytest.raises(ConfigError, match="must differ in seed"):
            _cfg(primary=["mid.s0", "mid.s0"]).check()
        return
    with pytest.raises(ConfigError, match=field):
        cfg.check()


def test_pre_register_adds_one_variant_per_seed_and_the_null_arm():
    cfg = SweepConfig(inputs={"repos": "x"}, seed=7)
    cfg.pre_register("mid", "all sources", [7, 8, 9], "midtraining helps", null_tokens=512)
    assert cfg.primary == ["mid", "mid.s8", "mid.s9"] and cfg.null_arm == "null_lr0"
    assert [cfg.variants[n].seed for n in cfg.primary] == [7, 8, 9]
    null = cfg.variants["null_lr0"]
    assert null.tokens == 512 and "optim.lr=0" in null.train and cfg.primary_about == "midtraining helps"
    cfg.check()
    bad = SweepConfig(inputs={"repos": "x"}, seed=7)
    bad.pre_register("m", "a", [8, 8], "h", 1)  # one seed twice is one sample, not two
    with pytest.raises(ConfigError, match="primary"):
        bad.check()
