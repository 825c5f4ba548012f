"""bench/plan.py: the README's 500B-token example runs, and its figures follow from the rates given."""

from __future__ import annotations

import json
import subprocess
import sys

from sources_fixtures import REPO_ROOT

README_EXAMPLE = ["--total-tokens", "500e9", "--gpus", "512", "--tokens-per-s-per-gpu", "8000",
                  "--input", "repos=3TB", "commits=1TB", "pulls=200GB", "traces=50GB", "buildlogs=300GB",
                  "--mixture", "repos=0.55", "commits=0.15", "pulls=0.1", "traces=0.1", "buildlogs=0.1"]


def run_plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "plan.py"), *args], capture_output=True,
                          text=True, cwd=REPO_ROOT)


def test_readme_example_is_the_documented_command():
    readme = (REPO_ROOT / "README.md").read_text()
    assert "bench/plan.py " + " ".join(README_EXAMPLE[:6]) in " ".join(readme.replace("\\\n", " ").split())
    proc = run_plan(*README_EXAMPLE)
    assert proc.returncode == 0, proc.stderr
    # 500e9 tokens / (8000 tokens/s/GPU * 512 GPUs) = 122,070 s = 33.9 hours
    assert "= 33.9 hours (1.4 days, 17,361 GPU-hours)" in proc.stdout
    for stage in ("read", "curate", "tokenize", "pack"):
        assert f"total {stage}" in proc.stdout


def test_figures_follow_from_the_rates(tmp_path):
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"read": {"repos": 0.5}, "curate": 2.0, "tokenize": 4.0, "pack": 100.0}))
    proc = run_plan("--total-tokens", "1e9", "--gpus", "1", "--tokens-per-s-per-gpu", "1000", "--task-hours", "1",
                    "--input", "repos=36GB", "--mixture", "repos=1", "--keep", "repos=0.5", "--rates", str(rates))
    assert proc.returncode == 0, proc.stderr
    # columns: source, stage, input (2 words), MB/s/core, core-hours, disk (2 words), --tasks
    rows = {line.split()[1]: line.split() for line in proc.stdout.splitlines() if line.startswith("repos ")}
    # read: 36e3 MB / 0.5 MB/s = 72,000 s = 20 core-hours -> 20 one-hour tasks; raw JSONL.gz at 0.3 -> 10.8 GB
    assert rows["read"][5] == "20" and rows["read"][6:8] == ["10.8", "GB"] and rows["read"][8] == "20"
    # curate: 36e3 MB at 2 MB/s = 5 core-hours
    assert rows["curate"][5] == "5" and rows["curate"][8] == "5"
    # tokenize: the kept half, 18e3 MB / 4 MB/s = 1.25 core-hours -> 2 tasks; cache: 18e9 / 3.5 * 4 B
    assert rows["tokenize"][8] == "2" and rows["tokenize"][6:8] == ["20.6", "GB"]
    # 1e9 tokens at 1000 tokens/s on one GPU = 277.8 hours
    assert "= 277.8 hours" in proc.stdout


def test_bad_arguments_name_the_problem():
    proc = run_plan("--total-tokens", "1e9", "--gpus", "1", "--tokens-per-s-per-gpu", "1",
                    "--input", "repos=3 parsecs", "--mixture", "repos=1")
    assert proc.returncode == 2 and "size '3 parsecs'" in proc.stderr
    proc = run_plan("--total-tokens", "1e9", "--gpus", "1", "--tokens-per-s-per-gpu", "1",
                    "--input", "repos=3TB", "--mixture", "repos=0.5", "traces=0.5")
    assert proc.returncode == 2 and "--mixture names traces without an --input size" in proc.stderr
