"""The comparison report: table values and deltas come from the result files; figures are written."""

from __future__ import annotations

import json

import pytest

from midtrain.cli import main
from midtrain.eval.report import write_report


def _checkpoint(root, *, heldout, sources, acc, nll, swe=None, curve=(3.0, 2.0, 1.5), probe_sha="abc"):
    (root / "sft" / "run").mkdir(parents=True)
    (root / "sft" / "run" / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i + 1, "loss": v}) + "\n" for i, v in enumerate(curve)) + "garbage\n"
    )
    (root / "sft" / "sft_result.json").write_text(
        json.dumps(
            {
                "recipe": "sft_probe_demo",
                "probe_sha": probe_sha,
                "from": f"runs/{root.name}",
                "run_dir": str(root / "sft" / "run"),
                "heldout_loss": heldout,
                "final_train_loss": curve[-1],
            }
        )
    )
    (root / "proxy").mkdir()
    cells = [
        {"task": "function", "length": n, "depth": d, "n": 2, "accuracy": acc, "answer_nll": nll}
        for n in (256, 512)
        for d in (0.0, 0.5, 1.0)
    ]
    (root / "proxy" / "proxy_results.json").write_text(
        json.dumps(
            {
                "heldout": {
                    "per_source": {s: {"loss": v, "tokens": 100} for s, v in sources.items()},
                    "all": {"loss": sum(sources.values()) / len(sources), "tokens": 100 * len(sources)},
                },
                "retrieval": {
                    "lengths": [256, 512],
                    "depths": [0.0, 0.5, 1.0],
                    "cells": cells,
                    "accuracy": acc,
                    "answer_nll": nll,
                },
            }
        )
    )
    if swe is not None:
        (root / "swebench").mkdir()
        (root / "swebench" / "swebench_results.json").write_text(
            json.dumps({b: {"resolved": r, "total": 100, "rate": r / 100} for b, r in swe.items()})
        )


def test_report_table_deltas_and_figures(tmp_path):
    _checkpoint(
        tmp_path / "base",
        heldout=2.0,
        sources={"repo": 3.0, "pr": 4.0},
        acc=0.25,
        nll=5.0,
        swe={"verified": 60, "pro": 32},
    )
    _checkpoint(
        tmp_path / "mid",
        heldout=1.5,
        sources={"repo": 2.5, "pr": 4.5},
        acc=0.5,
        nll=4.0,
        swe={"verified": 64, "pro": 35},
    )
    md = write_report({"base": tmp_path / "base", "mid": tmp_path / "mid"}, tmp_path / "report", "base").read_text()
    assert "| SWE-bench Verified | 60.0 | 64.0 (+4.0, one sample, no band) |" in md
    assert "| SWE-bench Pro | 32.0 | 35.0 (+3.0, one sample, no band) |" in md
    assert "SWE-bench Multilingual" not in md  # never run: no row
    assert "| held-out loss, assistant tokens | 2.000 | 1.500 (-0.500, one sample, no band) |" in md
    assert "| pr | 4.000 | 4.500 (+0.500, one sample, no band) |" in md  # no test on one value
    assert "accuracy, mean over depth x length | 25.0% | 50.0% (+25.0, one sample, no band)" in md
    assert "identical settings for every checkpoint" in md
    for png in ("curves.png", "heldout_loss.png", "retrieval_heatmap.png"):
        assert (tmp_path / "report" / png).stat().st_size > 5000
        assert f"({png})" in md
    res = json.loads((tmp_path / "report" / "results.json").read_text())
    assert {r["metric"]: r["values"] for r in res["rows"]}["repo"] == {"base": 3.0, "mid": 2.5}
    assert "<table>" in (tmp_path / "report" / "report.html").read_text()


def test_report_links_the_data_card_of_the_shards_measured_on(tmp_path):
    _checkpoint(tmp_path / "base", heldout=2.0, sources={"repo": 3.0}, acc=0.25, nll=5.0)
    _checkpoint(tmp_path / "mid", heldout=1.5, sources={"repo": 2.5}, acc=0.5, nll=4.0)
    with_card, without = tmp_path / "shards", tmp_path / "other_shards"
    with_card.mkdir()
    (with_card / "datacard.md").write_text("# data card\n")
    for name, shards in (("base", with_card), ("mid", without)):
        f = tmp_path / name / "proxy" / "proxy_results.json"
        f.write_text(json.dumps({**json.loads(f.read_text()), "config": {"shards": str(shards)}}))
    md = write_report({"base": tmp_path / "base", "mid": tmp_path / "mid"}, tmp_path / "report").read_text()
    assert "## Training data" in md
    assert f"data card [{with_card / 'datacard.md'}]" in md
    assert f"`midtrain inspect {without} --card` writes one" in md


def test_report_lists_missing_results_and_flags_different_probes(tmp_path):
    _checkpoint(tmp_path / "a", heldout=2.0, sources={"repo": 3.0}, acc=0.0, nll=6.0)
    _checkpoint(tmp_path / "b", heldout=1.0, sources={"repo": 2.0}, acc=0.0, nll=5.0, probe_sha="other")
    (tmp_path / "b" / "proxy" / "proxy_results.json").write_text("{broken")
    (tmp_path / "c").mkdir()
    md = write_report({"a": tmp_path / "a", "b": tmp_path / "b", "c": tmp_path / "c"}, tmp_path / "r").read_text()
    assert "settings differ between checkpoints" in md
    assert "unreadable" in md and "proxy_results.json" in md
    assert "missing" in md and "sft_result.json" in md
    # a result that is not there reads as missing with its reason in the table, never an empty cell
    assert "| repo | 3.000 | missing: proxy/proxy_results.json unreadable | — |" in md  # c ran no proxy
    assert (
        "| final train loss | 1.500 | 1.500 (+0.000, one sample, no band) | missing: sft/sft_result.json not written |"
        in md
    )
    with pytest.raises(ValueError, match="baseline"):
        write_report({"a": tmp_path / "a"}, tmp_path / "r", baseline="zzz")


def test_report_command(tmp_path, capsys):
    _checkpoint(tmp_path / "x", heldout=2.0, sources={"repo": 3.0}, acc=0.5, nll=1.0)
    assert (
        main(
            [
                "report",
                f"first={tmp_path / 'x'}",
                str(tmp_path / "x"),
                "--output",
                str(tmp_path / "out"),
                "--title",
                "T",
            ]
        )
        == 0
    )
    md = (tmp_path / "out" / "report.md").read_text()
    assert md.startswith("# T") and "| metric | first (baseline) | x |" in md
    assert main(["report"]) == 2
