"""SWE-bench orchestration: generated files pass mini-swe-agent's and swebench's own loaders; reports parse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm: no network fetch at import

from midtrain.eval.config import SweBenchConfig
from midtrain.eval.graders import parse_harness_report, parse_pro_results
from midtrain.eval.swebench_instances import convert_predictions
from midtrain.eval.swebench_plan import write_run
from midtrain.eval.swebench_results import collect_results, exit_status


@pytest.fixture()
def run_dir(tmp_path):
    cfg = SweBenchConfig(max_steps=42, max_context=32768, max_output_tokens=2048, port=8123, instance_slice="0:3")
    files = write_run(cfg, tmp_path / "hf", tmp_path / "swebench")
    return cfg, files, tmp_path / "swebench"


def test_agent_config_loads_with_mini_swe_agent(run_dir):
    from minisweagent.agents.default import AgentConfig
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments.docker import DockerEnvironmentConfig
    from minisweagent.models import get_model

    cfg, files, _ = run_dir
    for bench, workdir in (("verified", "/testbed"), ("pro", "/app")):
        conf = get_config_from_spec(str(files[f"{bench}/agent.yaml"]))
        agent = AgentConfig(**conf["agent"])
        assert agent.step_limit == 42 and agent.cost_limit == 0.0
        assert workdir in agent.instance_template
        model = get_model(config=conf["model"])
        assert model.config.model_name == "hosted_vllm/midtrain"
        assert model.config.model_kwargs["api_base"] == "http://localhost:8123/v1"
        assert model.config.model_kwargs["max_tokens"] == 2048
        env = {k: v for k, v in conf["environment"].items() if k != "environment_class"}
        assert DockerEnvironmentConfig(image="swebench/sweb.eval.x86_64.x:latest", **env).cwd == workdir


def test_generated_scripts_are_valid_bash_and_wire_the_pieces(run_dir):
    cfg, files, out = run_dir
    for path in files.values():
        if path.suffix in (".sh", ".sbatch"):
            subprocess.run(["bash", "-n", str(path)], check=True)
    serve = files["serve"].read_text()
    assert "vllm serve" in serve and str(out.parent / "hf") in serve and "--max-model-len 32768" in serve
    agent = files["verified/agent"].read_text()
    assert "mini-extra swebench --subset SWE-bench/SWE-bench_Verified" in agent and "--slice 0:3" in agent
    grade = files["verified/grade"].read_text()
    assert "swebench.harness.run_evaluation" in grade and "--instance_ids" in grade
    run = files["run"].read_text()
    assert run.index("verified/agent.sh") < run.index("kill $SERVER 2>/dev/null; wait") < run.index("verified/grade.sh")
    assert "SWEBENCH_PRO_DIR" in files["pro/grade"].read_text()


def test_predictions_from_mini_swe_agent_load_in_the_harness(tmp_path):
    from minisweagent.run.benchmarks.swebench import update_preds_file
    from swebench.harness.utils import get_predictions_from_file

    preds = tmp_path / "preds.json"
    update_preds_file(preds, "django__django-11099", "hosted_vllm/midtrain", "diff --git a/x b/x\n")
    update_preds_file(preds, "astropy__astropy-12907", "hosted_vllm/midtrain", "")  # agent failed: empty
    out = tmp_path / "preds.jsonl"
    counts = convert_predictions(preds, out)
    assert counts == {"predictions": 2, "empty_patch": 1, "dropped_no_instance_id": 0}
    loaded = get_predictions_from_file(str(out), "SWE-bench/SWE-bench_Verified", "test")
    assert {p["instance_id"] for p in loaded} == {"django__django-11099", "astropy__astropy-12907"}
    assert all(p["model_name_or_path"] == "hosted_vllm/midtrain" for p in loaded)


def _harness_report(tmp_path, monkeypatch, outcomes: dict[str, bool | None]):
    """Run swebench's own make_run_report over per-instance reports (None = no prediction)."""
    from swebench.harness.constants import LOG_REPORT, RUN_EVALUATION_LOG_DIR
    from swebench.harness.reporting import make_run_report

    grading = tmp_path / "swebench" / "verified" / "grading"
    grading.mkdir(parents=True)
    monkeypatch.chdir(grading)
    model = "hosted_vllm/midtrain"
    preds = {}
    for iid, resolved in outcomes.items():
        if resolved is None:
            continue
        preds[iid] = {"instance_id": iid, "model_name_or_path": model, "model_patch": "diff --git a/f b/f"}
        d = RUN_EVALUATION_LOG_DIR / "midtrain-verified" / model.replace("/", "__") / iid
        d.mkdir(parents=True)
        (d / LOG_REPORT).write_text(
            json.dumps(
                {
                    iid: {
                        "patch_is_None": False,
                        "patch_exists": True,
                        "patch_successfully_applied": True,
                        "resolved": resolved,
                    }
                }
            )
        )
    dataset = [{"instance_id": iid} for iid in outcomes]
    return make_run_report(preds, dataset, "midtrain-verified", None, str(grading))


def test_harness_report_parses_into_resolved_rate(tmp_path, monkeypatch):
    path = _harness_report(tmp_path, monkeypatch, {"a__a-1": True, "b__b-2": False, "c__c-3": True, "d__d-4": None})
    r = parse_harness_report(path)
    assert (r["resolved"], r["total"], r["submitted"], r["completed"]) == (2, 4, 3, 3)
    assert r["rate"] == pytest.approx(0.5)
    # collect finds it by run id and writes the results file
    pro = tmp_path / "swebench" / "pro" / "grading"
    pro.mkdir(parents=True)
    (pro / "eval_results.json").write_text(json.dumps({"instance_x": True, "instance_y": False}))
    (tmp_path / "swebench" / "pro" / "preds.jsonl").write_text(
        "".join(
            json.dumps({"instance_id": i, "model_patch": ""}) + "\n" for i in ("instance_x", "instance_y", "instance_z")
        )
    )
    for iid in ("instance_x", "instance_y"):  # both graded: the grader wrote their test reports
        (pro / iid).mkdir()
        (pro / iid / "_output.json").write_text(json.dumps({"tests": []}))
    results = collect_results(tmp_path / "swebench")
    assert results["verified"]["rate"] == pytest.approx(0.5)
    assert (results["pro"]["resolved"], results["pro"]["total"]) == (1, 3)  # instance_z never graded: an error
    assert (results["pro"]["failed"], results["pro"]["errors"], results["pro"]["error_ids"]) == (1, 1, ["instance_z"])
    assert json.loads((tmp_path / "swebench" / "swebench_results.json").read_text()) == results


def test_bad_reports_are_rejected_with_the_path(tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps({"resolved": 3}))
    with pytest.raises(ValueError, match="r.json"):
        parse_harness_report(bad)
    bad.write_text(json.dumps({"x": "yes"}))
    with pytest.raises(ValueError, match="eval_results"):
        parse_pro_results(bad)
    # collect records an unreadable report with its cause (no rate) instead of failing the whole run
    g = tmp_path / "out" / "verified" / "grading"
    g.mkdir(parents=True)
    (g / "m.midtrain-verified.json").write_text("{not json")
    got = collect_results(tmp_path / "out")
    assert got["verified"]["rate"] is None and got["verified"]["failures"][0]["step"] == "collect"
    assert "unreadable report" in got["verified"]["failures"][0]["cause"]
    assert exit_status(got) == 1


def test_collect_exit_status_says_whether_what_ran_was_graded(tmp_path):
    """One exit status for `midtrain eval swebench --collect` (which run.sh calls), --run and the local run: 1
    when a unit that ran failed a step, has no report, or graded nothing; 0 when every unit has a rate, or has
    not run yet (a queued run is pending, not failed)."""
    from midtrain.cli import main

    files = write_run(SweBenchConfig(benchmarks=["verified"]), tmp_path / "hf", tmp_path / "o")
    collect = ["eval", "swebench", "--collect", "--output", str(tmp_path / "o")]
    assert main(collect) == 0  # queued: nothing ran
    assert json.loads((tmp_path / "o" / "swebench_results.json").read_text())["verified"]["pending"] is True
    udir = files["verified/grade"].parent
    (udir / "agent.rc").write_text("0\n")
    (udir / "grade.rc").write_text("0\n")
    assert main(collect) == 1  # both steps exited 0, yet there is no report: not graded
    got = json.loads((tmp_path / "o" / "swebench_results.json").read_text())["verified"]
    assert "pending" not in got and "no grading report" in got["failures"][0]["cause"]
    (udir / "grading").mkdir()
    report = {"total_instances": 2, "resolved_instances": 1}
    (udir / "grading" / "m.midtrain-verified.json").write_text(json.dumps(report))
    assert main(collect) == 0
    (udir / "grading" / "m.midtrain-verified.json").write_text(json.dumps(report | {"total_instances": 0}))
    assert main(collect) == 1  # a report over no instance: nothing graded (rate null)
    (udir / "grade.rc").write_text("1\n")
    assert exit_status(collect_results(tmp_path / "o")) == 1


def test_script_step_converts_predictions(tmp_path):
    preds = tmp_path / "preds.json"
    preds.write_text(
        json.dumps(
            {"i1": {"instance_id": "i1", "model_name_or_path": "m", "model_patch": "p"}, "bad": {"model_patch": "p"}}
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "midtrain.eval.swebench_steps", "predictions", str(preds), str(tmp_path / "p.jsonl")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1])["dropped_no_instance_id"] == 1
    assert (tmp_path / "p.jsonl").read_text().count("\n") == 1
    # a run.sh written before the steps had their own module is refused, never a silent no-op claim
    old = subprocess.run([sys.executable, "-m", "midtrain.eval.swebench", "claim"], capture_output=True, text=True)
    assert old.returncode == 1 and "midtrain.eval.swebench_steps" in old.stderr


def test_eval_swebench_command(tmp_path, capsys):
    from midtrain.cli import main

    assert main(["eval", "swebench", "--checkpoint", str(tmp_path / "nope"), "--output", str(tmp_path / "o")]) == 2
    assert "Hugging Face model directory" in capsys.readouterr().err
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert (
        main(
            [
                "eval",
                "swebench",
                "--checkpoint",
                str(hf),
                "--output",
                str(tmp_path / "o"),
                "benchmarks=[verified]",
                "max_steps=7",
            ]
        )
        == 0
    )
    assert (tmp_path / "o" / "verified" / "agent.yaml").exists() and not (tmp_path / "o" / "pro").exists()
    assert "step_limit: 7" in (tmp_path / "o" / "verified" / "agent.yaml").read_text()
    assert main(["eval", "swebench", "--collect", "--output", str(tmp_path / "o")]) == 0
    got = json.loads((tmp_path / "o" / "swebench_results.json").read_text())  # not run yet: said so, no rate
    assert list(got) == ["verified"] and got["verified"]["rate"] is None
    assert "no grading report" in got["verified"]["failures"][0]["cause"]


def test_pro_grader_errors_are_errors_not_failures(tmp_path):
    # Scale's grader writes `false` for an instance it could not run (Modal auth error, no image) as for one
    # whose tests failed; only a graded instance has GRADING/<id>/_output.json.
    grading = tmp_path / "grading"
    grading.mkdir()
    (grading / "eval_results.json").write_text(json.dumps({"a": True, "b": False, "c": False, "d": False}))
    for iid in ("a", "b"):
        (grading / iid).mkdir()
        (grading / iid / "_output.json").write_text(json.dumps({"tests": [{"name": "t", "status": "PASSED"}]}))
    (grading / "c").mkdir()  # the grader made its directory, then failed to pull the image: no _output.json
    r = parse_pro_results(grading / "eval_results.json")
    assert (r["resolved"], r["failed"], r["errors"], r["total"]) == (1, 1, 2, 4)
    assert r["error_ids"] == ["c", "d"] and r["completed"] == 2


def test_a_unit_that_graded_nothing_has_no_rate_and_mostly_empty_patches_are_flagged(tmp_path, monkeypatch):
    """Nothing graded (no Docker for any instance) is rate null, never a measured 0; a unit whose patches are
    mostly empty (a model server that died mid-run) is flagged in its results and said in the report."""
    from midtrain.eval.results import swebench_problems

    grading = tmp_path / "grading"
    grading.mkdir()
    (grading / "eval_results.json").write_text(json.dumps({"a": False, "b": False}))  # no _output.json: ungraded
    r = parse_pro_results(grading / "eval_results.json")
    assert r["rate"] is None and (r["errors"], r["total"]) == (2, 2)
    path = _harness_report(tmp_path / "h", monkeypatch, {"a__a-1": True, "b__b-2": True, "c__c-3": False})
    rep = json.loads(Path(path).read_text())  # the harness's own report, as if two patches had come back empty
    Path(path).write_text(json.dumps({**rep, "empty_patch_instances": 2, "resolved_instances": 1}))
    results = collect_results(tmp_path / "h" / "swebench")
    assert results["verified"]["flag"] == "mostly empty patches: 2 of 3"
    said = swebench_problems(results | {"pro": r}, tmp_path)
    assert any("mostly empty patches" in p for p in said) and any("pro" in p and "unknown" in p for p in said)


def _fake_pro_checkout(root):
    """A stand-in for scaleapi/SWE-bench_Pro-os: its layout (helper_code/, run_scripts/, dockerfiles/) and a
    swe_bench_pro_eval.py that records how it was called and checks its relative paths resolve."""
    (root / "helper_code").mkdir(parents=True)
    (root / "helper_code" / "sweap_eval_full_v2.jsonl").write_text("{}\n")
    (root / "run_scripts").mkdir()
    (root / "dockerfiles" / "base_dockerfile").mkdir(parents=True)
    (root / "swe_bench_pro_eval.py").write_text(
        "import json, os, sys\n"
        "args = dict(a[2:].split('=', 1) if '=' in a else (a[2:], True) for a in sys.argv[1:])\n"
        "for k in ('raw_sample_path', 'scripts_dir'):\n"
        "    assert os.path.exists(args[k]), k\n"
        "assert os.path.isdir('dockerfiles/base_dockerfile')  # Scale's grader opens these relative to cwd\n"
        "json.dump(args, open(os.path.join(args['output_dir'], 'args.json'), 'w'))\n"
        "json.dump({}, open(os.path.join(args['output_dir'], 'eval_results.json'), 'w'))\n"
    )


def test_pro_grade_step_uses_local_docker_and_scales_instance_table(tmp_path):
    cfg = SweBenchConfig(benchmarks=["pro"], grading_workers=3)
    files = write_run(cfg, tmp_path / "hf", tmp_path / "out")
    pro_dir = tmp_path / "SWE-bench_Pro-os"
    _fake_pro_checkout(pro_dir)
    (tmp_path / "out" / "pro" / "agent").mkdir()
    (tmp_path / "out" / "pro" / "agent" / "preds.json").write_text(
        json.dumps(
            {
                "instance_a": {
                    "instance_id": "instance_a",
                    "model_name_or_path": "m",
                    "model_patch": "diff --git a/x b/x\n",
                }
            }
        )
    )
    (tmp_path / "out" / "pro" / "instances.txt").write_text("instance_a\ninstance_b\n")  # b: no prediction
    env = {**os.environ, "SWEBENCH_PRO_DIR": str(pro_dir), "MIDTRAIN_PYTHON": sys.executable}
    subprocess.run(["bash", str(files["pro/grade"])], check=True, env=env, cwd=tmp_path)
    args = json.loads((tmp_path / "out" / "pro" / "grading" / "args.json").read_text())
    assert args["use_local_docker"] is True  # not Modal
    assert args["raw_sample_path"] == "helper_code/sweap_eval_full_v2.jsonl"
    assert args["dockerhub_username"] == "jefzda" and args["num_workers"] == "3"
    patches = json.loads((tmp_path / "out" / "pro" / "patches.json").read_text())
    assert patches == [
        {"instance_id": "instance_a", "patch": "diff --git a/x b/x\n", "prefix": ""},
        {"instance_id": "instance_b", "patch": "", "prefix": ""},
    ]  # graded as unresolved


def test_pro_agent_container_overrides_the_image_entrypoint(tmp_path, monkeypatch):
    import minisweagent.environments.docker as mdocker
    from minisweagent.config import get_config_from_spec

    files = write_run(SweBenchConfig(benchmarks=["verified", "pro"]), tmp_path / "hf", tmp_path / "out")
    started = []

    def fake_run(cmd, **kw):  # mini-swe-agent's own container start, recorded instead of executed
        started.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="cid\n", stderr="")

    monkeypatch.setattr(mdocker.subprocess, "run", fake_run)
    for bench in ("pro", "verified"):
        env = dict(get_config_from_spec(str(files[f"{bench}/agent.yaml"]))["environment"])
        env.pop("environment_class")
        mdocker.DockerEnvironment(image="jefzda/sweap-images:x", **env)
    pro, verified = started
    image = pro.index("jefzda/sweap-images:x")
    assert pro[image - 2 : image] == ["--entrypoint", ""] and pro[image + 1] == "sleep"
    assert "--entrypoint" not in verified  # SWE-bench's own images keep theirs


def test_pro_prompt_appends_requirements_and_interface(tmp_path):
    from midtrain.eval.swebench_instances import write_pro_rows

    row = {
        "instance_id": "instance_a__b-1",
        "problem_statement": "Title: crash on empty input",
        "requirements": "- `parse('')` must return an empty list",
        "interface": "No new interfaces are introduced.",
        "dockerhub_tag": "a.b-1",
    }
    assert write_pro_rows([row], tmp_path, "test") == 1
    out = json.loads((tmp_path / "test.jsonl").read_text())
    assert out["image_name"] == "jefzda/sweap-images:a.b-1"
    assert out["problem_statement"] == (
        "Title: crash on empty input\n\nRequirements:\n- `parse('')` must return an "
        "empty list\n\nNew interfaces introduced:\nNo new interfaces are introduced."
    )
    with pytest.raises(ValueError, match="instance_a__b-1.*interface"):
        write_pro_rows([{k: v for k, v in row.items() if k != "interface"}], tmp_path, "test")


@pytest.mark.parametrize(
    "hf,max_context,ok",
    [
        # YaRN: vLLM's limit is original_max_position_embeddings x factor, whatever max_position_embeddings says
        (
            {
                "max_position_embeddings": 262144,
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
            },
            131072,
            True,
        ),
        (
            {
                "max_position_embeddings": 262144,
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
            },
            262144,
            False,
        ),
        (
            {"max_position_embeddings": 40960, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}},
            32768,
            True,
        ),
        (
            {"max_position_embeddings": 40960, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}},
            131072,
            False,
        ),
    ],
)
def test_max_context_is_checked_against_the_checkpoint(tmp_path, hf, max_context, ok):
    from midtrain.config import ConfigError

    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(hf))
    cfg = SweBenchConfig(benchmarks=["verified"], max_context=max_context)
    if ok:
        write_run(cfg, tmp_path / "hf", tmp_path / "out")
    else:
        with pytest.raises(ConfigError, match=r"max_context=\d+: above the checkpoint's context.*config\.json"):
            write_run(cfg, tmp_path / "hf", tmp_path / "out")


FAKE_DOCKER = """#!{py}
# `docker run -d ... IMAGE sleep T` -> an id; `docker exec -w DIR -e K=V... ID CMD...` -> CMD run here, with
# the image's /root and /testbed mapped into ROOT
import os, subprocess, sys
root, a = {root!r}, sys.argv[1:]
if a[0] == "run":
    print("cid"); sys.exit(0)
assert a[0] == "exec"
env, i, cwd = dict(os.environ), 1, None
while a[i] in ("-w", "-e"):
    if a[i] == "-w":
        cwd = a[i + 1]
    else:
        k, _, v = a[i + 1].partition("=")
        env[k] = v.replace("/root", root)
    i += 2
sys.exit(subprocess.run(a[i + 1:], env=env, cwd=root).returncode)
"""


def test_agent_submits_on_images_whose_bashrc_prints_an_error(tmp_path):
    # SWE-bench issue 638: some Multilingual images' /root/.bashrc sources a missing conda.sh; with
    # mini-swe-agent's BASH_ENV=/root/.bashrc that error comes first in every output, so its submit check
    # (first line == COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT) never fires. Ours sources it quietly.
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments.docker import DockerEnvironment
    from minisweagent.exceptions import Submitted

    root = tmp_path / "root"
    root.mkdir()
    (root / ".bashrc").write_text("source /opt/miniconda3/etc/profile.d/conda.sh\nexport ACTIVATED=yes\n")
    docker = tmp_path / "docker"
    docker.write_text(FAKE_DOCKER.format(py=sys.executable, root=str(root)))
    docker.chmod(0o755)
    submit = {"command": 'echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo "$ACTIVATED"'}

    def env_of(conf):
        env = {k: v for k, v in conf["environment"].items() if k != "environment_class"}
        return DockerEnvironment(image="img", **{**env, "executable": str(docker)})

    builtin = env_of(get_config_from_spec("swebench.yaml"))
    out = builtin.execute(submit)  # no Submitted: the error line comes first
    assert "conda.sh" in out["output"].splitlines()[0]
    files = write_run(SweBenchConfig(benchmarks=["multilingual"]), tmp_path / "hf", tmp_path / "out")
    ours = env_of(get_config_from_spec(str(files["multilingual/agent.yaml"])))
    with pytest.raises(Submitted) as e:
        ours.execute(submit)
    assert e.value.messages[0]["content"].strip() == "yes"  # .bashrc still sourced (testbed activation kept)
    assert ours.execute({"command": "exit 3"})["returncode"] == 3
    assert ours.config.pull_timeout == 1800


def test_standalone_sbatch_takes_the_site_config(tmp_path, capsys):
    from pathlib import Path

    from midtrain.cli import main

    example = Path(__file__).resolve().parents[1] / "slurm" / "site.example.yaml"
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"max_position_embeddings": 131072}))
    assert (
        main(
            [
                "eval",
                "swebench",
                "--checkpoint",
                str(hf),
                "--output",
                str(tmp_path / "o"),
                "--site",
                str(example),
                "--site-set",
                "protocol.eval_swebench.partition=gpu-long",
                "benchmarks=[verified]",
            ]
        )
        == 0
    )
    sbatch = (tmp_path / "o" / "swebench.sbatch").read_text()
    for line in (
        "--partition=gpu-long",
        "--account=my-project",
        "--time=1-00:00:00",
        "--cpus-per-task=16",
        "--mem=0",
        "--gpus-per-node=8",
        "--exclusive",
    ):
        assert f"#SBATCH {line}\n" in sbatch
    assert "NCCL_SOCKET_IFNAME" in sbatch and sbatch.rstrip().endswith(f"bash {tmp_path / 'o' / 'run.sh'}")
    subprocess.run(["bash", "-n", str(tmp_path / "o" / "swebench.sbatch")], check=True)
    with pytest.raises(Exception, match="tensor_parallel=8.*4 GPUs"):
        from midtrain.launch.site import load_site

        write_run(
            SweBenchConfig(benchmarks=["verified"]),
            hf,
            tmp_path / "o2",
            load_site(example, ["protocol.eval_swebench.gpus_per_node=4"]),
        )


def test_report_says_which_units_failed_and_which_instances_were_not_graded(tmp_path):
    from midtrain.eval.results import load_checkpoint_results

    sw = tmp_path / "ck" / "swebench"
    sw.mkdir(parents=True)
    (sw / "swebench_results.json").write_text(
        json.dumps(
            {
                "verified": {
                    "resolved": 0,
                    "total": 3,
                    "rate": None,
                    "failures": [{"step": "grade", "cause": "docker: permission denied"}],
                },
                "pro": {"resolved": 1, "total": 4, "rate": 0.25, "errors": 2, "error_ids": ["a", "b"]},
            }
        )
    )
    probs = load_checkpoint_results("ck", tmp_path / "ck").problems
    assert any("swebench verified" in p and "grade failed: docker: permission denied" in p for p in probs)
    assert any("swebench pro" in p and "2 of 4 instances not graded" in p for p in probs)


def test_text_action_format_parses_the_vendored_trajectories_turns_the_tool_call_one_does_not(tmp_path):
    """The probe trains mini-swe-agent's text trajectories (THOUGHT + one ```bash block): with
    action_format=text the agent's own parser reads their assistant turns as actions, and its prompt asks for
    that fence; the tool-call config's prompt does not."""
    from minisweagent.config import get_config_from_spec
    from minisweagent.exceptions import FormatError
    from minisweagent.models import get_model
    from minisweagent.models.utils.actions_text import parse_regex_actions

    cfg = SweBenchConfig(action_format="text", max_context=32768, port=8123, instance_slice="0:1")
    files = write_run(cfg, tmp_path / "hf", tmp_path / "swebench")
    conf = get_config_from_spec(str(files["verified/agent.yaml"]))
    model = get_model(config=conf["model"])
    assert type(model).__name__ == "LitellmTextbasedModel"
    assert (
        "```bash" in conf["agent"]["system_template"] and "mswea_bash_command" not in conf["agent"]["system_template"]
    )
    traces = Path(__file__).resolve().parents[1] / "data_prep" / "samples" / "real_traces"
    turns = [
        m["content"]
        for f in sorted(traces.glob("*.traj.json"))
        for m in json.loads(f.read_text())["messages"]
        if m["role"] == "assistant"
    ]
    parsed = 0
    for t in turns:
        try:
            parse_regex_actions(t, action_regex=model.config.action_regex, format_error_template="{{actions|length}}")
            parsed += 1
        except FormatError:
            pass
    assert len(turns) > 100 and parsed / len(turns) > 0.95
    tool = get_config_from_spec(
        str(write_run(SweBenchConfig(port=8123), tmp_path / "h2", tmp_path / "s2")["verified/agent.yaml"])
    )
    assert "```bash" not in tool["agent"]["system_template"]
