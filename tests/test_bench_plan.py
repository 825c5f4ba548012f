"""`midtrain plan`: the prep guide's (docs/prep.md) 500B-token example runs, its figures follow from the rates given (defaults,
bench JSON outputs, --rate), and bad arguments are named. bench/plan.py still runs it."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from sources_fixtures import REPO_ROOT

from midtrain.cli import main
from midtrain.launch.plan import DEFAULT_RATES, Size, load_rates, parse_size, plan

README_EXAMPLE = [
    "--total-tokens",
    "500e9",
    "--gpus",
    "512",
    "--tokens-per-s-per-gpu",
    "8000",
    "--input",
    "repos=3TB",
    "commits=1TB",
    "pulls=200GB",
    "traces=50GB",
    "buildlogs=300GB",
    "--mixture",
    "repos=0.55",
    "commits=0.15",
    "pulls=0.1",
    "traces=0.1",
    "buildlogs=0.1",
]


def run_plan(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["plan", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def stage_rows(stdout: str, source: str) -> dict[str, list[str]]:
    """columns: source, stage, input (2 words), MB/s/core, core-hours, disk (2 words), --tasks"""
    return {line.split()[1]: line.split() for line in stdout.splitlines() if line.startswith(source + " ")}


def test_readme_example_is_the_documented_command(capsys):
    guide = " ".join((REPO_ROOT / "docs" / "prep.md").read_text().replace("\\\n", " ").split())
    assert "midtrain plan " + " ".join(README_EXAMPLE) in guide
    rc, out, err = run_plan(capsys, *README_EXAMPLE)
    assert rc == 0, err
    # 500e9 tokens / (8000 tokens/s/GPU * 512 GPUs) = 122,070 s = 33.9 hours
    assert "= 33.9 hours (1.4 days, 17,361 GPU-hours)" in out
    for stage in ("read", "curate", "tokenize", "pack"):
        assert f"total {stage}" in out
    # repos read at the default 0.76 MB/s per core: 3e6 MB / 0.76 / 3600 = 1,096 core-hours -> 549 two-hour tasks
    assert stage_rows(out, "repos")["read"][4:6] == ["0.76", "1,096"] and stage_rows(out, "repos")["read"][8] == "549"
    # traces: 50 GB kept at 0.8 -> 11.4 Gtok available for a 50 Gtok target: more than max_repeat=4 epochs
    assert [line for line in out.splitlines() if line.startswith("traces ") and "capped" in line]
    # pack tasks hold at most 2 Gtok each: 275 + 75 + 50 + 45.7 (traces, capped at 4 x 11.4) + 50 Gtok -> 249
    assert "  midtrain pack ... tokenize_tasks=149 tasks=249\n" in out


def test_figures_follow_from_the_rates(tmp_path, capsys):
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"read": {"repos": 0.5}, "curate": 2.0, "tokenize": 4.0, "pack": 100.0}))
    rc, out, err = run_plan(
        capsys,
        "--total-tokens",
        "1e9",
        "--gpus",
        "1",
        "--tokens-per-s-per-gpu",
        "1000",
        "--task-hours",
        "1",
        "--input",
        "repos=36GB",
        "--mixture",
        "repos=1",
        "--keep",
        "repos=0.5",
        "--rates",
        str(rates),
    )
    assert rc == 0, err
    rows = stage_rows(out, "repos")
    # read: 36e3 MB / 0.5 MB/s = 72,000 s = 20 core-hours -> 20 one-hour tasks; raw JSONL.gz at 0.3 -> 10.8 GB
    assert rows["read"][5] == "20" and rows["read"][6:8] == ["10.8", "GB"] and rows["read"][8] == "20"
    # curate: 36e3 MB at 2 MB/s = 5 core-hours
    assert rows["curate"][5] == "5" and rows["curate"][8] == "5"
    # tokenize: the kept half, 18e3 MB / 4 MB/s = 1.25 core-hours -> 2 tasks; cache: 18e9 / 3.5 * 4 B
    assert rows["tokenize"][8] == "2" and rows["tokenize"][6:8] == ["20.6", "GB"]
    # 1e9 tokens at 1000 tokens/s on one GPU = 277.8 hours
    assert "= 277.8 hours" in out
    # one prep run does read + curate: 25 core-hours -> 25 one-hour tasks; pack 1e9 tokens fits one task
    assert "  midtrain prep repos ... --tasks 25\n  midtrain pack ... tokenize_tasks=2 tasks=1\n" in out


def test_bench_json_outputs_and_single_rates_override_the_defaults(tmp_path):
    prep = tmp_path / "prep.json"  # the shapes bench_prep.py, bench_curate_speed.py and bench_tokenize.py write
    prep.write_text(
        json.dumps(
            {
                "bench": "prep",
                "rows": [
                    {"source": "repos", "in_MB_per_s": 2.5},
                    {"source": "traces", "in_MB_per_s": 9.0},
                    {"source": "traces (chat template)", "in_MB_per_s": 1.5},
                ],
            }
        )
    )
    curate = tmp_path / "curate.json"
    curate.write_text(
        json.dumps(
            {
                "repos": {"source": "repos", "full_mb_per_s_core": 3.1, "full_s": 2.0},
                "pulls": {"source": "pulls", "full_mb_per_s_core": 2.2, "full_s": 3.0},
            }
        )
    )
    tokenize = tmp_path / "tokenize.json"
    tokenize.write_text(json.dumps({"code_only": {"ours_mb_per_s": 3.3}}))
    rates = load_rates([str(prep), str(curate), str(tokenize)], {"commits": 7.0, "pack": 80.0})
    assert rates["read"] == {**DEFAULT_RATES["read"], "repos": 2.5, "traces": 1.5, "commits": 7.0}
    assert (rates["curate"], rates["tokenize"], rates["pack"]) == (2.2, 3.3, 80.0)
    assert DEFAULT_RATES["read"]["repos"] == 0.76  # the defaults are not changed in place
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"loss": 1.0}))
    with pytest.raises(ValueError, match="other.json: not a bench_prep.py"):
        load_rates([str(other)])
    with pytest.raises(ValueError, match="positive.*curate"):
        load_rates(None, {"curate": 0.0})


def test_sizes_in_tokens_and_the_token_budget():
    assert parse_size("3TB") == Size(3e12) and parse_size("2GiB") == Size(2 * 2**30)
    assert parse_size("100Gtok") == Size(100e9, tokens=True) and parse_size("5e9tokens") == Size(5e9, tokens=True)
    # 7 Gtok of traces at 3.5 bytes/token = 24.5 GB read; 80 % kept = 5.6 Gtok for a 2 Gtok target
    result = plan(
        {"traces": parse_size("7Gtok")}, {"traces": 1.0}, 2e9, load_rates(), {"traces": 0.8}, bytes_per_token=3.5
    )
    b = result.budget["traces"]
    assert b.input_bytes == pytest.approx(24.5e9) and b.tokens_available == pytest.approx(5.6e9)
    assert b.repeats == pytest.approx(2 / 5.6)
    read = result.stages[0]
    assert read.stage == "read" and read.core_hours == pytest.approx(24.5e3 / DEFAULT_RATES["read"]["traces"] / 3600)
    assert read.tasks(task_hours=1.0) == math.ceil(read.core_hours)
    pack = result.stages[3]  # packs the target's tokens (within max_repeat), 4 bytes each on disk
    assert pack.stage == "pack" and pack.disk_bytes == pytest.approx(2e9 * 4)


def test_bad_arguments_name_the_problem(capsys):
    common = ["--total-tokens", "1e9", "--gpus", "1", "--tokens-per-s-per-gpu", "1"]
    rc, _, err = run_plan(capsys, *common, "--input", "repos=3 parsecs", "--mixture", "repos=1")
    assert rc == 2 and "size '3 parsecs'" in err
    rc, _, err = run_plan(capsys, *common, "--input", "repos=3TB", "--mixture", "repos=0.5", "traces=0.5")
    assert rc == 2 and "--mixture names traces without an --input size" in err
    rc, _, err = run_plan(capsys, *common, "--input", "repos=3TB", "--mixture", "repos=1", "--rate", "dedup=3")
    assert rc == 2 and "--rate 'dedup=3'" in err
    rc, _, err = run_plan(capsys, *common, "--input", "repos=3TB", "--mixture", "repos=1", "--rates", "nope.json")
    assert rc == 2 and "nope.json" in err


def test_bench_plan_script_runs_the_command():
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "plan.py"), *README_EXAMPLE],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "= 33.9 hours" in proc.stdout
