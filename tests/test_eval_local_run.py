"""The agent leg executed on CPU: embedded tasks from the sample repository, a served checkpoint and the oracle
endpoint, mini-swe-agent's real batch runner in its local environment with the generated config, grading into
the swebench harness's report format, read back by the same collect and shown by the protocol report."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hf_helpers import bigram_qwen3

from midtrain.cli import main as cli_main
from midtrain.eval.local_run import BUGS, _test_outcomes, build_tasks

IM_END = 151645
STEPS, MAX_TOKENS = 2, 16
LOCAL = ["benchmarks=[local,local_oracle]", f"max_steps={STEPS}", "max_context=4096", f"max_output_tokens={MAX_TOKENS}"]


def test_tasks_fail_at_base_and_pass_with_the_gold_patch(tmp_path):
    repo, tasks = build_tasks(tmp_path)
    rows = [json.loads(line) for line in (tasks / "test.jsonl").read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == [b.id for b in BUGS]
    for row in rows:
        for gold in (False, True):
            work = tmp_path / f"w-{row['instance_id']}-{gold}"
            subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
            subprocess.run(["git", "-C", str(work), "checkout", "-q", row["base_commit"]], check=True)
            patches = [row["test_patch"]] + ([row["patch"]] if gold else [])
            for patch in patches:
                subprocess.run(["git", "apply", "-"], cwd=work, input=patch, text=True, check=True)
            f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
            got = _test_outcomes(work, f2p + p2p)
            assert all(got[t] for t in p2p), (row["instance_id"], got)
            assert all(got[t] == gold for t in f2p), (row["instance_id"], gold, got)


def test_grading_is_isolated_from_an_enclosing_project(tmp_path, monkeypatch):
    """A testbed inside a checkout (the demo's .demo/ under the repository) is graded as SWE-bench grades it, in
    isolation: the enclosing pyproject.toml's addopts, its conftest.py and the caller's PYTEST_ADDOPTS change
    nothing (they used to make pytest name every test from the checkout's rootdir, so all read as failed)."""
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-k nothing_matches"\n')
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture(autouse=True)\n"
        "def _hostile():\n    raise RuntimeError('conftest from above')\n"
    )
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x --deselect tests")
    repo, tasks = build_tasks(tmp_path / "data")
    row = json.loads((tasks / "test.jsonl").read_text().splitlines()[0])
    work = tmp_path / ".demo" / "grading" / "work" / row["instance_id"]
    subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "checkout", "-q", row["base_commit"]], check=True)
    for patch in (row["test_patch"], row["patch"]):
        subprocess.run(["git", "apply", "-"], cwd=work, input=patch, text=True, check=True)
    ids = json.loads(row["FAIL_TO_PASS"]) + json.loads(row["PASS_TO_PASS"])
    got = _test_outcomes(work, ids)
    assert got == dict.fromkeys(ids, True)


def test_a_slice_is_graded_as_the_instances_asked_for(tmp_path):
    """instance_slice=0:1 asks for one instance: the run report counts 1 of 1, not 1 of every task row."""
    from midtrain.eval.local_run import grade

    repo, tasks = build_tasks(tmp_path / "data")
    row = json.loads((tasks / "test.jsonl").read_text().splitlines()[0])
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        json.dumps({"instance_id": row["instance_id"], "model_name_or_path": "oracle", "model_patch": row["patch"]})
        + "\n"
    )
    report = json.loads(
        grade(preds, tasks, repo, tmp_path / "grading", "t", instance_ids=[row["instance_id"]]).read_text()
    )
    assert (report["total_instances"], report["resolved_instances"]) == (1, 1), report


def test_junit_testcases_map_to_node_ids_through_classes_and_parameters():
    from midtrain.eval.local_run import _node_ids

    assert "tests/test_x.py::TestY::test_z[a.b-1]" in _node_ids("tests.test_x.TestY", "test_z[a.b-1]")
    assert _node_ids("test_top", "test_a") == ["test_top.py::test_a"]
    assert _node_ids("", "test_a") == []


def _tiny_export(out: Path) -> Path:
    """A tiny Qwen3 export with the export's chat files (Qwen tokenizer, generation config): its blocks are
    zero, so greedy decoding after the generation prompt's last token ('\\n') walks 'Done.' then <|im_end|>."""
    from midtrain.formats.tokenizer import load_tokenizer
    from midtrain.train.hf_export import chat_files, copy_tokenizer

    tok_dir = out.parent / "qwen_tok"
    tok = load_tokenizer(None)
    tok.save_pretrained(str(tok_dir))
    chain = tok.encode("\n") + tok.encode("Done.") + [IM_END]
    bigram_qwen3(out, chain, max_position_embeddings=8192)
    (out / "generation_config.json").unlink()
    copy_tokenizer(out, tok_dir, None, "qwen3")
    hf_cfg = json.loads((out / "config.json").read_text())
    chat_files(out, hf_cfg, None)
    (out / "config.json").write_text(json.dumps(hf_cfg))
    return out


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory):
    """One `midtrain eval swebench benchmarks=[local,local_oracle]` run on the tiny export (the CLI path a
    protocol step takes), shared by the tests below: (export, output dir, exit code, wall seconds)."""
    import time

    tmp = tmp_path_factory.mktemp("local_run")
    export = _tiny_export(tmp / "export")
    out = tmp / "swebench"
    t = time.time()
    rc = cli_main(["eval", "swebench", *LOCAL, "--checkpoint", str(export), "--output", str(out)])
    return export, out, rc, time.time() - t


@pytest.mark.slow
def test_oracle_resolves_every_task_through_mini_swe_agent(local_runs):
    _, out, rc, _ = local_runs
    assert rc == 0, (out / "local_oracle" / "agent.log").read_text()[-3000:]
    results = json.loads((out / "swebench_results.json").read_text())
    oracle = results["local_oracle"]
    assert (oracle["resolved"], oracle["total"], oracle["asked"], oracle["rate"]) == (3, 3, 3, 1.0), oracle
    preds = json.loads((out / "local_oracle" / "agent" / "preds.json").read_text())
    assert sorted(preds) == [b.id for b in BUGS]
    assert all(p["model_patch"].startswith("diff --git") for p in preds.values())


@pytest.mark.slow
def test_served_tiny_model_is_graded_and_collected(local_runs, capsys):
    """The checkpoint's own run: every reply stops at <|im_end|>, the agent ends at its step limit, the
    instances are graded (none resolved: the model never submits) and --collect reads the report with the
    instances asked for as the denominator."""
    _, out, rc, _ = local_runs
    assert rc == 0, (out / "local" / "agent.log").read_text()[-3000:]
    replies = [json.loads(line) for line in (out / "local" / "server.jsonl").read_text().splitlines()]
    assert len(replies) == STEPS * len(BUGS)  # the step limit bounds the run
    assert {(r["stop_token"], r["finish_reason"], r["completion_tokens"]) for r in replies} == {
        ("<|im_end|>", "stop", 3)
    }  # 'Done', '.', <|im_end|>: never the token limit, never an invented turn
    assert (out / "local" / "instances.txt").read_text().split() == [b.id for b in BUGS]
    report = json.loads(next((out / "local" / "grading").glob("*.midtrain-local.json")).read_text())
    assert report["total_instances"] == 3 and report["empty_patch_instances"] == 3
    assert cli_main(["eval", "swebench", "--collect", "--output", str(out)]) == 0
    local = json.loads(capsys.readouterr().out)["local"]
    assert (local["resolved"], local["total"], local["asked"], local["rate"]) == (0, 3, 3, 0.0), local
    assert "failures" not in local


@pytest.mark.slow
def test_a_rerun_on_the_same_checkpoint_reuses_the_results(local_runs, tmp_path):
    export, out, _, _ = local_runs
    before = (out / "local" / "agent.log").stat().st_mtime_ns
    assert cli_main(["eval", "swebench", *LOCAL, "--checkpoint", str(export), "--output", str(out)]) == 0
    assert (out / "local" / "agent.log").stat().st_mtime_ns == before
    # another checkpoint (other weights) into the same output is not reused: this one does not even load
    broken = tmp_path / "broken"
    shutil.copytree(export, broken)
    next(broken.glob("*.safetensors")).write_bytes(b"not weights")
    work = tmp_path / "out"
    shutil.copytree(out, work)
    rc = cli_main(
        ["eval", "swebench", "benchmarks=[local]", *LOCAL[1:], "--checkpoint", str(broken), "--output", str(work)]
    )
    assert rc == 1
    local = json.loads((work / "swebench_results.json").read_text())["local"]
    assert local["failures"][0]["step"] == "agent" and local["total"] == 3  # graded: every instance unresolved
    assert "Traceback" in (work / "local" / "agent.log").read_text()


@pytest.mark.slow
def test_protocol_report_shows_the_resolved_rate_rows(local_runs, tmp_path):
    """The report writer on real result files: each checkpoint's embedded-task run and its oracle row."""
    from midtrain.eval.report import write_report

    _, out, _, _ = local_runs
    runs = {}
    for name in ("base", "midtrained"):
        shutil.copytree(out, tmp_path / name / "swebench", ignore=shutil.ignore_patterns("data", "testbed"))
        runs[name] = tmp_path / name
    md = write_report(runs, tmp_path / "report").read_text()
    rows = {r["metric"]: r["values"] for r in json.loads((tmp_path / "report" / "results.json").read_text())["rows"]}
    assert rows["Embedded CPU tasks (midtrain.eval.local_run)"] == {"base": 0.0, "midtrained": 0.0}
    oracle = "Embedded CPU tasks, oracle endpoint (gold patches: the plumbing check)"
    assert rows[oracle] == {"base": 100.0, "midtrained": 100.0}
    assert f"| {oracle} | 100.0 | 100.0 (+0.0, one sample, no band) |" in md
    assert "| Embedded CPU tasks (midtrain.eval.local_run) | 0.0 | 0.0 (+0.0, one sample, no band) |" in md
    results = json.loads((out / "swebench_results.json").read_text())
    for bench in ("local", "local_oracle"):  # how many replies an agent could act on, counted per unit
        actions = results[bench]["actions"]
        assert actions["format"] == "tool_calls" and actions["parseable"] <= actions["replies"]


def test_local_and_cluster_benchmarks_do_not_mix():
    from midtrain.config import ConfigError
    from midtrain.eval.config import SweBenchConfig

    with pytest.raises(ConfigError, match="run here on CPU"):
        SweBenchConfig(benchmarks=["verified", "local"]).validate()
    SweBenchConfig(benchmarks=["local", "local_oracle"]).validate()
