"""SWE-bench across agent harnesses: SWE-agent and OpenHands runs from the same checkpoint and server as
mini-swe-agent, their configs checked against the harnesses' documented schemas; results as
benchmark x harness x checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from typing import Literal

import pytest
import yaml

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from midtrain.config import ConfigError
from midtrain.eval.config import SweBenchConfig
from midtrain.eval.harnesses import (
    HarnessConfigError,
    check_openhands,
    check_swe_agent,
    openhands_limit,
    openhands_predictions,
)
from midtrain.eval.swebench_plan import write_run
from midtrain.eval.swebench_results import collect_results

ALL: list[Literal["mini-swe-agent", "swe-agent", "openhands"]] = ["mini-swe-agent", "swe-agent", "openhands"]


@pytest.fixture()
def run(tmp_path):
    cfg = SweBenchConfig(
        max_steps=42,
        max_context=32768,
        max_output_tokens=2048,
        port=8123,
        instance_slice="0:3",
        harnesses=ALL,
        benchmarks=["verified", "pro"],
    )
    return cfg, write_run(cfg, tmp_path / "hf", tmp_path / "swe"), tmp_path / "swe"


def test_every_harness_gets_the_same_server_model_and_limits(run):
    cfg, files, out = run
    mini = yaml.safe_load((out / "verified" / "agent.yaml").read_text())["model"]
    swe = yaml.safe_load((out / "verified" / "swe-agent" / "swe_agent.yaml").read_text())
    check_swe_agent(swe)
    m = swe["agent"]["model"]
    assert (m["name"], m["api_base"]) == (mini["model_name"], mini["model_kwargs"]["api_base"])
    assert (m["per_instance_call_limit"], m["max_output_tokens"], m["temperature"]) == (42, 2048, 0.0)
    assert swe["instances"] == {
        "type": "swe_bench",
        "subset": "verified",
        "split": "test",
        "deployment": {"type": "docker"},
        "slice": "0:3",
    }
    pro = yaml.safe_load((out / "pro" / "swe-agent" / "swe_agent.yaml").read_text())
    assert pro["instances"]["type"] == "file" and pro["instances"]["path"].endswith("pro/dataset/test.jsonl")
    oh = check_openhands((out / "verified" / "openhands" / "config.toml").read_text(), "midtrain")
    llm = oh["llm"]["midtrain"]
    assert (llm["model"], llm["base_url"], llm["max_output_tokens"]) == (
        mini["model_name"],
        mini["model_kwargs"]["api_base"],
        2048,
    )
    assert oh["core"]["max_iterations"] == 42
    assert "pro/openhands/agent" not in files  # OpenHands' runner has no Pro instances


def test_scripts_run_all_agents_on_one_server_then_grade_each(run):
    cfg, files, out = run
    for path in files.values():
        if path.suffix in (".sh", ".sbatch"):
            subprocess.run(["bash", "-n", str(path)], check=True)
    text = files["run"].read_text()
    kill = text.index("kill $SERVER 2>/dev/null; wait")
    for agent in (
        "verified/agent.sh",
        "verified/swe-agent/agent.sh",
        "verified/openhands/agent.sh",
        "pro/swe-agent/agent.sh",
    ):
        assert text.index(agent) < kill
    for grade in ("verified/grade.sh", "verified/swe-agent/grade.sh", "verified/openhands/grade.sh"):
        assert text.index(grade) > kill
    oh = files["verified/openhands/agent"].read_text()
    assert "--eval-n-limit 3" in oh and "--llm-config llm.midtrain" in oh and "OPENHANDS_DIR" in oh
    assert "--run_id midtrain-verified-swe-agent" in files["verified/swe-agent/grade"].read_text()


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda c: c["agent"]["model"].update(bogus=1), "swe-agent.agent.model.bogus"),
        (lambda c: c["agent"]["model"].update(temperature="hot"), "swe-agent.agent.model.temperature"),
        (lambda c: c["instances"].update(subset="pro"), "swe-agent.instances.subset"),
        (lambda c: c["instances"].update(type="hub"), "swe-agent.instances.type"),
        (lambda c: c.update(workers=3), "swe-agent.workers"),
    ],
)
def test_swe_agent_schema_rejects_what_swe_agent_would(run, mutate, field):
    _, _, out = run
    conf = yaml.safe_load((out / "verified" / "swe-agent" / "swe_agent.yaml").read_text())
    mutate(conf)
    with pytest.raises(HarnessConfigError, match=field.replace(".", r"\.")):
        check_swe_agent(conf)


def test_openhands_schema_and_slice_rules(run):
    _, _, out = run
    text = (out / "verified" / "openhands" / "config.toml").read_text()
    with pytest.raises(HarnessConfigError, match=r"openhands\.llm\.midtrain\.modle"):
        check_openhands(text.replace("model =", "modle = 1\nmodel ="), "midtrain")
    with pytest.raises(HarnessConfigError, match="llm.other"):
        check_openhands(text, "other")
    assert tomllib.loads(text)["sandbox"]["use_host_network"] is True
    assert openhands_limit(":7") == 7 and openhands_limit("") is None
    with pytest.raises(HarnessConfigError, match="first N"):
        openhands_limit("5:10")
    with pytest.raises(ConfigError, match="harnesses"):
        SweBenchConfig(harnesses=["swe-agent"], environment="singularity").validate()


def test_harness_results_and_report_rows(tmp_path):
    from midtrain.eval.report import write_report

    def checkpoint(name, rates):
        out = tmp_path / name / "swebench"
        for key, resolved in rates.items():
            bench, _, harness = key.partition("/")
            grading = out / bench / harness / "grading" if harness else out / bench / "grading"
            grading.mkdir(parents=True)
            run_name = f"{bench}-{harness}" if harness else bench
            (grading / f"midtrain.midtrain-{run_name}.json").write_text(
                json.dumps({"total_instances": 10, "resolved_instances": resolved})
            )
        return collect_results(out)

    got = checkpoint("base", {"verified": 5, "verified/swe-agent": 3, "verified/openhands": 2})
    assert got["verified/swe-agent"]["rate"] == 0.3 and got["verified"]["rate"] == 0.5
    checkpoint("mid", {"verified": 6, "verified/swe-agent": 6, "verified/openhands": 5})
    md = write_report({"base": tmp_path / "base", "mid": tmp_path / "mid"}, tmp_path / "r", "base").read_text()
    assert "| SWE-bench Verified · swe-agent | 30.0 | 60.0 (+30.0, one sample, no band) |" in md
    assert "| SWE-bench Verified · openhands | 20.0 | 50.0 (+30.0, one sample, no band) |" in md


def test_openhands_output_converts_to_harness_predictions(tmp_path):
    d = tmp_path / "agent" / "SWE-bench_Verified-test" / "CodeActAgent" / "m_maxiter_42"
    d.mkdir(parents=True)
    (d / "output.jsonl").write_text(
        "\n".join(
            [
                json.dumps({"instance_id": "a__b-1", "test_result": {"git_patch": "diff --git a/x b/x\n"}}),
                json.dumps({"instance_id": "a__b-2", "test_result": {}}),
                "not json",
            ]
        )
        + "\n"
    )
    counts = openhands_predictions(tmp_path / "agent", tmp_path / "preds.jsonl")
    assert counts == {"predictions": 2, "empty_patch": 1, "dropped_unreadable": 1}
    rows = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == ["a__b-1", "a__b-2"] and rows[0]["model_patch"].startswith("diff")
