"""Every bench/bench_*.py follows bench/run_all.py's interface (``--json PATH``, ``--smoke``, exit 0, a JSON
object of figures), so ``make bench`` reaches every script's figures. Run at smoke size; nothing is timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.stem for p in (ROOT / "bench").glob("bench_*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_script_follows_run_all_interface(script: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_all.py"), "--smoke", "--only", script, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    report = json.loads((out / "results.json").read_text())
    assert proc.returncode == 0 and not report["failures"], (
        report["failures"],
        proc.stdout[-3000:],
        proc.stderr[-3000:],
    )
    assert list(report["results"]) == [script]
    figures = report["results"][script]["figures"]
    assert isinstance(figures, dict) and figures
    table = (out / "results.md").read_text()
    assert f"| {script} |" in table and "FAILED" not in table


def test_run_all_reports_a_script_that_rejects_the_interface(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that does not take --json fails the run and shows as FAILED in the table (exit 1)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_all", ROOT / "bench" / "run_all.py")
    assert spec is not None and spec.loader is not None
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "bench_bad.py").write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    monkeypatch.setattr(run_all, "HERE", bench)
    assert run_all.main(["--smoke", "--out", str(tmp_path / "out")]) == 1
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert report["failures"] == {"bench_bad": "exit 2, no bench_bad.json"}
    assert "| bench_bad | FAILED |" in (tmp_path / "out" / "results.md").read_text()


# scripts whose --json/--smoke are still their own; an entry that uses bench_parser now fails (the list only shrinks)
OWN_PARSER: dict[str, str] = {}


def test_every_bench_script_takes_the_interface_from_bench_parser() -> None:
    """run_all.py's interface is declared once (bench/figures.py: bench_parser), not by each script."""
    own = {s for s in SCRIPTS if "bench_parser(" not in (ROOT / "bench" / f"{s}.py").read_text()}
    assert own == set(OWN_PARSER), own ^ set(OWN_PARSER)
