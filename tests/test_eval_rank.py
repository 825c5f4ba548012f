"""Proxy vs probe: rank correlations (checked against scipy), their seed interval, and the sweep report's table
that says when a proxy would have picked another winner."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from scipy import stats

from midtrain.eval.rank import agreement, kendall, proxy_agreements, spearman
from midtrain.eval.report import build_rows
from midtrain.eval.results import CheckpointResults
from midtrain.formats.checkpoints import file_sha256
from midtrain.formats.rundir import MARKER, checkpoint_name
from midtrain.formats.stamp import content_id

PROBE = "SFT probe/held-out loss, assistant tokens"
HELDOUT = "Proxy: held-out loss (before SFT)/all sources"
RETRIEVAL = "Proxy: code retrieval (before SFT)/accuracy, mean over depth x length"


@pytest.mark.parametrize("seed", range(6))
def test_correlations_match_scipy_with_ties(seed):
    rng = random.Random(seed)
    x = [rng.choice([1.0, 2.0, 3.0, 4.0]) for _ in range(9)]
    y = [rng.choice([1.0, 2.0, 3.0]) for _ in range(9)]
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
    assert kendall(x, y) == pytest.approx(stats.kendalltau(x, y).statistic)  # tau-b
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None  # a constant side has no order


# probe held-out loss per seed (lower is better) and base-model proxies per checkpoint
PROBE_LOSS = {"base": [2.00, 2.02], "a": [1.80, 1.82], "b": [1.90, 1.91], "c": [1.70, 1.73]}
PROXY_LOSS = {"base": 3.0, "a": 2.6, "b": 2.8, "c": 2.5}  # orders them as the probe does
RETRIEVAL_ACC = {"base": [0.2, 0.2], "a": [0.9, 0.8], "b": [0.5, 0.6], "c": [0.4, 0.5]}  # picks a, not c


def _results() -> list[CheckpointResults]:
    out = []
    for name in PROBE_LOSS:
        r = CheckpointResults(name=name, root=Path(name))
        r.sft_runs = [{"heldout_loss": v} for v in PROBE_LOSS[name]]
        r.proxy = {"heldout": {"all": {"loss": PROXY_LOSS[name]}, "per_source": {}}}
        r.proxy_runs = [{"retrieval": {"accuracy": v, "answer_nll": 1.0}} for v in RETRIEVAL_ACC[name]]
        out.append(r)
    return out


def test_proxy_agreement_per_metric_with_a_seed_interval():
    rows = build_rows(_results())
    got = {a.proxy: a for a in proxy_agreements(rows, PROBE)}
    held = got[HELDOUT]
    assert held.spearman == pytest.approx(1.0) and held.kendall == pytest.approx(1.0)
    assert (held.proxy_pick, held.probe_pick, held.same_pick) == ("c", "c", True)
    assert held.spearman_interval is not None  # the probe side has two seeds
    retr = got[RETRIEVAL]
    means = {n: sum(v) / 2 for n, v in RETRIEVAL_ACC.items()}
    names = list(PROBE_LOSS)
    expected = stats.spearmanr([means[n] for n in names], [-sum(PROBE_LOSS[n]) / 2 for n in names]).statistic
    assert retr.spearman == pytest.approx(expected)
    assert (retr.proxy_pick, retr.probe_pick, retr.same_pick) == ("a", "c", False)
    assert retr.spearman is not None and retr.spearman_interval is not None
    lo, hi = retr.spearman_interval
    assert -1.0 <= lo <= retr.spearman <= hi <= 1.0


def test_one_seed_gives_no_interval_and_two_checkpoints_no_correlation():
    rows = build_rows(_results()[:2])
    a = agreement(
        next(r for r in rows if f"{r.group}/{r.metric}" == PROBE),
        next(r for r in rows if f"{r.group}/{r.metric}" == HELDOUT),
    )
    assert a.spearman is None and "needs >= 3 checkpoints" in a.note
    single = _results()
    for r in single:
        r.sft_runs = r.sft_runs[:1]
        r.proxy_runs = r.proxy_runs[:1]
    held = {x.proxy: x for x in proxy_agreements(build_rows(single), PROBE)}[HELDOUT]
    assert held.spearman is not None and held.spearman_interval is None and "no interval" in held.note


def _complete_checkpoint(run_dir: Path, weights: str) -> str:
    """A complete midtrain checkpoint of WEIGHTS under RUN_DIR (complete.json with its file's SHA-256); its
    content id."""
    ckpt = run_dir / "checkpoints" / checkpoint_name(1)
    ckpt.mkdir(parents=True)
    (ckpt / "model.bin").write_text(weights)
    marker = {"files": {"model.bin": len(weights)}, "sha256": {"model.bin": file_sha256(ckpt / "model.bin")}}
    (ckpt / MARKER).write_text(json.dumps(marker))
    return content_id(ckpt)


def test_sweep_report_has_the_correlation_table(tmp_path):
    from midtrain.sweep.report import write_sweep_report
    from midtrain.sweep_config import SweepConfig
    from recipes import resolve_config

    cfg = resolve_config("sweep_demo", SweepConfig, "sweep", [f"output={tmp_path}", "variants={a: {}, b: {}, c: {}}"])
    base = cfg.baseline
    for name in PROBE_LOSS:
        ck = base if name == "base" else name
        # each column's checkpoint, complete, where the sweep trains it; its results name its content (the report
        # shows a cell only from its own checkpoint's results)
        run = tmp_path / "base" if name == "base" else tmp_path / name / "run"
        start = _complete_checkpoint(run, f"weights of {name}")
        for i, loss in enumerate(PROBE_LOSS[name]):
            d = tmp_path / ck / ("sft" if i == 0 else f"sft-s{4321 + i}")
            d.mkdir(parents=True)
            result = {"inputs": {"start": start}, "exit_code": 0, "heldout_loss": loss, "final_train_loss": loss}
            (d / "sft_result.json").write_text(json.dumps(result))
        for i, acc in enumerate(RETRIEVAL_ACC[name]):
            d = tmp_path / ck / ("proxy" if i == 0 else f"proxy-s{4321 + i}")
            d.mkdir(parents=True)
            (d / "proxy_results.json").write_text(
                json.dumps(
                    {
                        "inputs": {"checkpoint": start},
                        "heldout": {"all": {"loss": PROXY_LOSS[name]}, "per_source": {}},
                        "retrieval": {"accuracy": acc, "answer_nll": 1.0},
                    }
                )
            )
    md = write_sweep_report(cfg).read_text()
    assert "## Do the proxies rank like the probe?" in md
    assert f"| {HELDOUT} | 4 | +1.00 [" in md
    assert f"Choosing by **{RETRIEVAL}** would have picked **a**, not the probe's **c**." in md
    got = json.loads((tmp_path / "report" / "sweep.json").read_text())["proxy_agreement"]
    assert {g["proxy"]: g["same_pick"] for g in got}[RETRIEVAL] is False
