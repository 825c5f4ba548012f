"""DeepSWE as a benchmark entry: tasks read from the benchmark's own Harbor task files, a Pier job with its
own Python >= 3.12 environment against our server, its trials collected into the same results; and its
repositories and base commits known to decontamination."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from midtrain.eval.config import SweBenchConfig
from midtrain.eval.deepswe import parse_trials, read_tasks
from midtrain.eval.swebench_plan import write_run
from midtrain.eval.swebench_results import collect_results

TASKS = Path(__file__).parent / "data" / "deepswe" / "tasks"  # copied from datacurve-ai/deep-swe (README)
BUNDLED = Path(__file__).resolve().parents[1] / "midtrain" / "curate" / "data" / "deepswe_tasks.tsv"


def _bundled() -> dict[str, list[str]]:
    rows = [line.split("\t") for line in BUNDLED.read_text().splitlines() if line and not line.startswith("#")]
    return {r[0]: r for r in rows}


def test_tasks_read_from_harbor_task_files_match_the_bundled_list():
    rows = read_tasks(TASKS)
    assert [r["instance_id"] for r in rows] == ["abs-module-cache-flags", "dateutil-rfc5545-timezone-interop"]
    bundled = _bundled()
    assert len(bundled) == 113 and len({r[1].lower() for r in bundled.values()}) == 91
    for r in rows:
        task, repo, base, lang, image = bundled[r["instance_id"]]
        assert r["repo"].removeprefix("https://github.com/").removesuffix(".git") == repo
        assert (r["base_commit"], r["language"], r["image"]) == (base, lang, image)
    with pytest.raises(ValueError, match="no Harbor tasks"):
        read_tasks(TASKS.parent / "nothing")


def test_decontamination_knows_every_deepswe_repository_and_base_commit():
    from midtrain.curate.decontam import DecontamConfig, SweBenchRepoFilter, build_index

    idx = build_index(DecontamConfig(use_swebench_package=False))
    bundled = _bundled()
    assert {r[1].lower() for r in bundled.values()} <= idx.repos
    assert idx.base_commits["cb1b3b671d0ee9fa9da9f7b02f86967953ffd10a"] == "deepswe:abs-module-cache-flags"
    step = SweBenchRepoFilter(DecontamConfig(use_swebench_package=False))
    assert step.match({"repo": "https://github.com/abs-lang/abs.git"}) == ("swebench_repo", "abs-lang/abs")
    assert step.match({"repo": "someone/task"}) is None  # go-task/task's name is too generic for a fork match
    assert step.match_history({"base_commit": "cb1b3b671d0ee9fa9da9f7b02f86967953ffd10a"}) == (
        "swebench_base_commit",
        "deepswe:abs-module-cache-flags",
    )


FAKE_PIER = """#!{py}
# Pier stand-in: checks the run's arguments, writes one trial per included task as Pier's TrialResult does
import fnmatch, json, sys, yaml
from pathlib import Path
a = sys.argv[1:]
assert a[0] == "run"
opt = lambda k: a[a.index(k) + 1]
incl = [a[i + 1] for i, x in enumerate(a) if x == "-i"]
conf = yaml.safe_load(open(opt("--ak").split("=", 1)[1]))
assert conf["model"]["model_kwargs"]["api_base"] == "http://127.0.0.1:{port}/v1", conf
assert opt("--model") == "hosted_vllm/midtrain" and opt("--agent") == "mini-swe-agent"
job = Path(opt("--jobs-dir")) / opt("--job-name")
for t in sorted(Path(opt("-p")).glob("*/task.toml")):
    tid = t.parent.name
    if incl and not any(fnmatch.fnmatch("datacurve/" + tid, p) for p in incl):
        continue
    d = job / (tid[:20] + "__abc")
    d.mkdir(parents=True)
    reward = {{"reward": 1}} if tid.startswith("abs") else None  # the second: the verifier crashed
    d.joinpath("result.json").write_text(json.dumps({{"task_name": "datacurve/" + tid, "trial_name": d.name,
        "verifier_result": {{"rewards": reward}} if reward else None,
        "exception_info": None if reward else {{"exception_type": "VerifierError"}}}}))
"""


def test_deepswe_job_runs_pier_in_its_own_environment_and_collects(tmp_path):
    cfg = SweBenchConfig(
        benchmarks=["deepswe"], instance_slice="0:2", port=80, harnesses=["mini-swe-agent", "swe-agent"]
    )
    files = write_run(cfg, tmp_path / "hf", tmp_path / "out")
    assert "deepswe/swe-agent/agent" not in files  # Pier drives mini-swe-agent only
    agent = files["deepswe/agent"].read_text()
    assert "uv venv --python 3.12" in agent and "datacurve-pier>=0.3.1" in agent and 'python3.12}" -m venv' in agent
    assert "--host 0.0.0.0" in files["serve"].read_text()
    for p in files.values():
        if p.suffix == ".sh":
            subprocess.run(["bash", "-n", str(p)], check=True)
    pier = tmp_path / "out" / "deepswe" / "pier-env" / "bin" / "pier"  # an environment already made
    pier.parent.mkdir(parents=True)
    pier.write_text(FAKE_PIER.format(py=sys.executable, port=80))
    pier.chmod(0o755)
    env = {
        **os.environ,
        "DEEPSWE_DIR": str(TASKS.parent),
        "MIDTRAIN_SERVER_HOST": "127.0.0.1",
        "MIDTRAIN_PYTHON": sys.executable,
    }
    subprocess.run(["bash", str(files["deepswe/agent"])], check=True, env=env)
    subprocess.run(["bash", str(files["deepswe/grade"])], check=True, env=env)
    layer = yaml.safe_load((tmp_path / "out" / "deepswe" / "pier_agent.yaml").read_text())
    assert layer["agent"]["step_limit"] == cfg.max_steps and layer["model"]["model_name"] == "hosted_vllm/midtrain"
    got = collect_results(tmp_path / "out")["deepswe"]
    assert (got["resolved"], got["total"], got["errors"], got["error_ids"]) == (
        1,
        2,
        1,
        ["dateutil-rfc5545-timezone-interop"],
    )
    assert got["rate"] == 0.5 and "failures" not in got


def test_trials_without_result_or_with_crash_sentinel_are_errors(tmp_path):
    for name, rewards in (("a", {"reward": 0}), ("b", {"reward": -1})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(
            json.dumps({"task_name": f"datacurve/{name}", "verifier_result": {"rewards": rewards}})
        )
    r = parse_trials(tmp_path, ["a", "b", "c"])
    assert (r["resolved"], r["failed"], r["errors"], r["error_ids"], r["total"]) == (0, 1, 2, ["b", "c"], 3)
    assert r["rate"] == 0.0  # one task graded (failed): a measured 0
    assert parse_trials(tmp_path, ["b", "c"])["rate"] is None  # none graded: unknown, not 0


def test_deepswe_needs_a_port_pier_s_egress_proxy_lets_through():
    """No-network DeepSWE tasks reach the server through Pier 0.3.1's squid proxy, which allows ports 80 and 443
    only: a server on 8000 would refuse every model call and each trial would read as a clean failure."""
    from midtrain.config import ConfigError

    with pytest.raises(ConfigError, match=r"port: deepswe: Pier's egress proxy .* \[80, 443\] only"):
        SweBenchConfig(benchmarks=["deepswe"]).validate()
    SweBenchConfig(benchmarks=["deepswe"], port=80).validate()
    SweBenchConfig(benchmarks=["verified"], port=8000).validate()  # the other benchmarks' agents run beside it
