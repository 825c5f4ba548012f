"""The SWE-bench agent leg executed here, on CPU: embedded tasks, an OpenAI-compatible endpoint, mini-swe-agent's
batch runner with its ``local`` environment, and grading into the `swebench` harness's report format.

- Tasks (:func:`build_tasks`): a handful built from the sample repository (data_prep/samples/repo, minicalc):
  each base commit plants one bug; the gold patch removes it, the test patch adds the test that catches it.
  Rows carry the SWE-bench instance schema (problem_statement, base_commit, patch, test_patch,
  FAIL_TO_PASS, PASS_TO_PASS).
- Endpoints (both :class:`midtrain.eval.endpoint.ChatEndpoint`): unit ``local`` serves the checkpoint's HF
  export (:class:`midtrain.eval.serve.ChatServer`, CPU); unit ``local_oracle`` (:class:`OracleServer`) answers
  with tool calls that apply the gold patch, write patch.txt and submit it: the plumbing check (litellm, the
  agent, submission, grading), which must resolve every task.
- Agent: ``mini-extra swebench`` with the config :func:`midtrain.eval.swebench_agents.agent_config` generates for a
  cluster run, plus a layer for the local environment (one testbed checkout, reset to each base commit).
- Grading (:func:`grade`): each patch on a fresh copy at its base commit, the test patch on top, the
  instance's tests run; per-instance reports and swebench's own ``make_run_report`` give the run report that
  ``collect`` reads. :func:`run_local` runs the units (``midtrain eval swebench benchmarks=[local,local_oracle]``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from midtrain.config import ConfigError
from midtrain.eval.benchmarks import BENCHMARKS
from midtrain.eval.endpoint import ChatEndpoint
from midtrain.eval.serve import ChatServer
from midtrain.eval.swebench_agents import agent_config
from midtrain.eval.swebench_instances import convert_predictions, slice_rows, write_instances
from midtrain.eval.swebench_plan import check_context
from midtrain.eval.swebench_results import RESULTS_FILE, collect_results
from midtrain.eval.swebench_scripts import INSTANCES, SERVER_LOG
from midtrain.formats.outputs import make_stamp
from midtrain.formats.stamp import content_id, read_stamp, stale_fields

log = logging.getLogger(__name__)

RUN_NAME = "local"  # results key and run id (midtrain-local)


@dataclass(frozen=True)
class _Bug:
    id: str
    file: str
    good: str
    bad: str
    problem: str
    test_file: str
    test: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]


BUGS = (
    _Bug(
        "acme__minicalc-101",
        "minicalc/ops.py",
        '"-": operator.sub',
        '"-": operator.add',
        "Subtraction adds: `evaluate('5 - 3')` returns 8.0 instead of 2.0.",
        "tests/test_task_sub.py",
        "from minicalc import evaluate\n\n\ndef test_sub():\n    assert evaluate('5 - 3') == 2.0\n",
        ("tests/test_task_sub.py::test_sub",),
        ("tests/test_eval.py::test_add", "tests/test_eval.py::test_div_zero"),
    ),
    _Bug(
        "acme__minicalc-102",
        "minicalc/parse.py",
        "float(parts[2])",
        "abs(float(parts[2]))",
        "A negative right operand loses its sign: `evaluate('2 * -5')` returns 10.0 instead of -10.0.",
        "tests/test_task_parse.py",
        "from minicalc import evaluate\n\n\ndef test_negative_right():\n    assert evaluate('2 * -5') == -10.0\n",
        ("tests/test_task_parse.py::test_negative_right",),
        ("tests/test_eval.py::test_add", "tests/test_eval.py::test_div_zero"),
    ),
    _Bug(
        "acme__minicalc-103",
        "minicalc/eval.py",
        'op == "/" and right == 0',
        'op == "/" and right == 1',
        "Dividing by zero raises ZeroDivisionError instead of CalcError('division by zero'), and dividing by one "
        "raises CalcError.",
        "tests/test_task_div.py",
        "from minicalc import evaluate\n\n\ndef test_div_one():\n    assert evaluate('7 / 1') == 7.0\n",
        ("tests/test_task_div.py::test_div_one", "tests/test_eval.py::test_div_zero"),
        ("tests/test_eval.py::test_add",),
    ),
)


def _git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "midtrain",
        "GIT_AUTHOR_EMAIL": "midtrain@localhost",
        "GIT_COMMITTER_NAME": "midtrain",
        "GIT_COMMITTER_EMAIL": "midtrain@localhost",
        "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _new_file_diff(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def build_tasks(root: str | Path, sample_repo: str | Path | None = None) -> tuple[Path, Path]:
    """ROOT/repo (a git repository: the sample repository, one branch per task with its bug) and
    ROOT/tasks/test.jsonl (the instances). Returns (repo, tasks dir)."""

    root = Path(root)
    src = Path(sample_repo) if sample_repo else Path(__file__).resolve().parents[2] / "data_prep" / "samples" / "repo"
    repo = root / "repo"
    shutil.copytree(src, repo, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "minicalc")
    rows = []
    for bug in BUGS:
        _git(repo, "checkout", "-q", "-b", bug.id, "main")
        f = repo / bug.file
        text = f.read_text()
        if bug.good not in text:
            raise ValueError(f"{f}: the sample repository changed, {bug.good!r} is gone (task {bug.id})")
        f.write_text(text.replace(bug.good, bug.bad, 1))
        _git(repo, "commit", "-q", "-am", f"{bug.id}: base")
        base = _git(repo, "rev-parse", "HEAD").strip()
        gold = _git(repo, "diff", "HEAD", "main", "--", bug.file)
        rows.append(
            {
                "instance_id": bug.id,
                "repo": "acme/minicalc",
                "base_commit": base,
                "problem_statement": bug.problem,
                "patch": gold,
                "test_patch": _new_file_diff(bug.test_file, bug.test),
                "FAIL_TO_PASS": json.dumps(list(bug.fail_to_pass)),
                "PASS_TO_PASS": json.dumps(list(bug.pass_to_pass)),
                "version": "0.1",
            }
        )
    _git(repo, "checkout", "-q", "main")
    tasks = root / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    (tasks / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return repo, tasks


# -- the oracle endpoint ---------------------------------------------------------------------------------
def oracle_commands(patch: str) -> list[str]:
    """What the oracle does for a task, one tool call a turn: apply the gold patch and write patch.txt, then
    submit it (the submission on its own, as the prompt asks). Two turns: it fits a small step limit."""
    return [
        f"git apply <<'MIDTRAIN_PATCH_EOF'\n{patch}MIDTRAIN_PATCH_EOF\ngit diff > patch.txt",
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt",
    ]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


class OracleServer(ChatEndpoint):
    """An OpenAI-compatible chat endpoint on localhost that answers each task with its gold patch."""

    def __init__(self, tasks: list[dict[str, Any]], model: str = "oracle", log_path: str | Path | None = None):
        super().__init__(model, log_path)
        self.tasks = tasks

    def answer(self, req: dict[str, Any]) -> dict[str, Any]:
        return self.reply(req.get("messages") or [])

    def reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        prompt = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
        task = next((t for t in self.tasks if t["problem_statement"] in prompt), None)
        turn = sum(m.get("role") == "assistant" for m in messages)
        if task is None:
            command = "echo 'no task in the prompt'"
        else:
            steps = oracle_commands(task["patch"])
            command = steps[min(turn, len(steps) - 1)]
        call = {
            "id": f"call_{self.calls}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})},
        }
        self.record({"turn": turn, "task": task and task["instance_id"]})
        return self.envelope(
            {"role": "assistant", "content": "", "tool_calls": [call]}, "tool_calls", len(prompt) // 4, 10
        )


# -- the agent --------------------------------------------------------------------------------------------
def local_layer(testbed: Path) -> dict[str, Any]:
    """What differs from a cluster run's agent.yaml: the local environment in one testbed checkout, reset to
    each instance's base commit before the agent starts (mini-swe-agent renders the command per instance)."""
    return {
        "environment": {"environment_class": "local", "cwd": str(testbed), "env": {"PAGER": "cat"}},
        "run": {"env_startup_command": "git checkout -q -f {{base_commit}} && git clean -q -fdx"},
    }


def run_agent(
    agent_yaml: Path,
    tasks: Path,
    repo: Path,
    out: Path,
    api_base: str,
    model: str,
    instance_slice: str = "",
    env: dict[str, str] | None = None,
    timeout: int = 600,
) -> int:
    """mini-swe-agent's batch runner over TASKS with the generated AGENT_YAML, against API_BASE, into OUT
    (OUT/preds.json); its output in OUT/../agent.log. Returns its exit status."""
    testbed = out.parent / "testbed"
    if testbed.exists():
        shutil.rmtree(testbed)
    if out.exists():  # a rerun starts afresh: mini-swe-agent skips instances it finds in an old preds.json
        shutil.rmtree(out)
    subprocess.run(["git", "clone", "-q", "--no-local", str(repo), str(testbed)], check=True)
    for bug in BUGS:  # every task's base commit in the testbed
        subprocess.run(["git", "-C", str(testbed), "fetch", "-q", "origin", f"{bug.id}:{bug.id}"], check=True)
    layer = out.parent / "local.yaml"
    conf = local_layer(testbed)
    conf["model"] = {"model_name": f"hosted_vllm/{model}", "model_kwargs": {"api_base": api_base}}
    layer.write_text(yaml.safe_dump(conf))
    mini = Path(sys.executable).with_name("mini-extra")
    cmd = [
        str(mini) if mini.exists() else "mini-extra",
        "swebench",
        "--subset",
        str(tasks),
        "--split",
        "test",
        "-c",
        str(agent_yaml),
        "-c",
        str(layer),
        "--output",
        str(out),
        "--workers",
        "1",
        "--environment-class",
        "local",
    ]
    if instance_slice:
        cmd += ["--slice", instance_slice]
    try:
        # mini-swe-agent's global config and the task set's dataset cache stay in the run's directory
        proc = subprocess.run(
            cmd,
            env={
                **os.environ,
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "MSWEA_SILENT_STARTUP": "1",
                "MSWEA_GLOBAL_CONFIG_DIR": str(out.parent / "mswea"),
                "HF_DATASETS_CACHE": str(out.parent / "hf_datasets"),
                **(env or {}),
            },
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        # TimeoutExpired carries the output as bytes even with text=True
        partial = ((e.stdout or b"") + (e.stderr or b"")).decode(errors="replace")
        text, rc = f"{partial}\nmini-extra swebench: no end after {timeout} s\n", 124
    (out.parent / "agent.log").write_text(text if isinstance(text, str) else text.decode(errors="replace"))
    return rc


# -- grading ----------------------------------------------------------------------------------------------
def _apply(cwd: Path, patch: str, what: str) -> str | None:
    if not patch.strip():
        return f"{what}: empty"
    p = subprocess.run(["git", "apply", "-"], cwd=cwd, input=patch, capture_output=True, text=True)
    return None if p.returncode == 0 else f"{what} did not apply: {p.stderr.strip()[:300]}"


def _node_ids(classname: str, name: str) -> list[str]:
    """The node ids a JUnit testcase can stand for: ``tests.test_x.TestY`` + ``test_z[a.b]`` is
    ``tests/test_x.py::TestY::test_z[a.b]`` or ``tests/test_x/TestY.py::test_z[a.b]``... (which dots were
    path separators is not recorded, so every split is a candidate)."""
    parts = classname.split(".") if classname else []
    return ["/".join(parts[:k]) + ".py::" + "::".join([*parts[k:], name]) for k in range(1, len(parts) + 1)]


def _test_outcomes(cwd: Path, ids: list[str]) -> dict[str, bool]:
    """pytest node id -> passed, from pytest's own JUnit report. The testbed is run in isolation, as SWE-bench
    runs it in its own container: its own rootdir and config (an empty one if it has none), no conftest.py or
    addopts from a project it happens to sit in (a checkout's .demo/), no PYTEST_ADDOPTS from the caller."""
    import xml.etree.ElementTree as ET

    junit = cwd / ".midtrain-junit.xml"
    own = next(
        (
            cwd / n
            for n in ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
            if (cwd / n).is_file()
        ),
        None,
    )
    config = own if own is not None else cwd / ".midtrain-pytest.ini"
    if own is None:
        config.write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--rootdir={cwd}",
            f"--confcutdir={cwd}",
            "-c",
            str(config),
            f"--junitxml={junit}",
            *ids,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    wanted, passed = set(ids), {}
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            ok = not any(c.tag in ("failure", "error", "skipped") for c in case)
            for node in _node_ids(case.get("classname", ""), case.get("name", "")):
                if node in wanted:
                    passed[node] = ok
                    break
    return {i: passed.get(i, False) for i in ids}


def grade(
    preds_jsonl: Path,
    tasks: Path,
    repo: Path,
    grading: Path,
    run_name: str = RUN_NAME,
    instance_ids: list[str] | None = None,
) -> Path:
    """Each prediction on a fresh copy at its base commit (test patch on top, the instance's tests run) ->
    per-instance report.json in the harness's log layout, then swebench's make_run_report over them. Only the
    ``instance_ids`` asked for (default: every task row) count as instances of the run."""
    from swebench.harness.constants import LOG_REPORT, RUN_EVALUATION_LOG_DIR
    from swebench.harness.reporting import make_run_report

    rows = [json.loads(line) for line in (tasks / "test.jsonl").read_text().splitlines() if line.strip()]
    if instance_ids is not None:
        rows = [r for r in rows if r["instance_id"] in set(instance_ids)]
    preds = {
        p["instance_id"]: p for p in (json.loads(line) for line in preds_jsonl.read_text().splitlines() if line.strip())
    }
    grading.mkdir(parents=True, exist_ok=True)
    run_id = f"midtrain-{run_name}"
    cwd = os.getcwd()
    os.chdir(grading)  # the harness's log dir is relative to the working directory, as when it grades
    try:
        for row in rows:
            pred = preds.get(row["instance_id"])
            if pred is None:
                continue
            model_dir = pred["model_name_or_path"].replace("/", "__")
            logdir = RUN_EVALUATION_LOG_DIR / run_id / model_dir / row["instance_id"]
            logdir.mkdir(parents=True, exist_ok=True)
            work = grading / "work" / row["instance_id"]
            if work.exists():
                shutil.rmtree(work)
            subprocess.run(["git", "clone", "-q", "--no-local", str(repo), str(work)], check=True)
            subprocess.run(["git", "-C", str(work), "fetch", "-q", "origin", row["base_commit"]], check=True)
            subprocess.run(["git", "-C", str(work), "checkout", "-q", row["base_commit"]], check=True)
            f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
            problem = _apply(work, pred["model_patch"], "model patch") or _apply(work, row["test_patch"], "test patch")
            outcomes = {} if problem else _test_outcomes(work, f2p + p2p)
            resolved = not problem and all(outcomes.values())
            (logdir / "test_output.txt").write_text(problem or json.dumps(outcomes, indent=1))
            (logdir / LOG_REPORT).write_text(
                json.dumps(
                    {
                        row["instance_id"]: {
                            "patch_is_None": False,
                            "patch_exists": bool(pred["model_patch"].strip()),
                            "patch_successfully_applied": not (problem or "").startswith("model patch"),
                            "resolved": resolved,
                            "tests_status": outcomes,
                        }
                    }
                )
            )
        report = make_run_report(preds, rows, run_id, None, str(grading))
    finally:
        os.chdir(cwd)
    return Path(report)


STAMP = "local_stamp.json"  # what a finished run was made from: the same checkpoint and settings reuse it


def _unit(
    cfg: Any,
    bench: str,
    udir: Path,
    tasks: Path,
    repo: Path,
    rows: list[dict[str, Any]],
    checkpoint: str | Path | None,
    timeout: int,
) -> None:
    """One unit (run.sh's layout): instances.txt, the agent against its endpoint, then grading; each step's
    exit status and log in <step>.rc / <step>.log, so collect records a failure with its cause."""

    if udir.exists():
        shutil.rmtree(udir)
    udir.mkdir(parents=True)
    write_instances(rows, cfg.instance_slice, udir / INSTANCES)
    (udir / "agent.yaml").write_text(yaml.safe_dump(agent_config(cfg, BENCHMARKS[bench]), sort_keys=False))
    oracle = BENCHMARKS[bench].oracle
    model = "oracle" if oracle else cfg.served_model_name
    try:
        server: ChatEndpoint
        if oracle:
            server = OracleServer(rows, model, udir / SERVER_LOG)
        else:
            assert checkpoint is not None  # run_local refuses benchmarks=[local] without one
            server = ChatServer(
                checkpoint, cfg.served_model_name, cfg.max_output_tokens, cfg.max_context, udir / SERVER_LOG
            )
        with server:
            rc = run_agent(
                udir / "agent.yaml",
                tasks,
                repo,
                udir / "agent",
                server.api_base,
                model,
                cfg.instance_slice,
                timeout=timeout,
            )
        log.info("swebench %s: agent exited %d after %d model calls", bench, rc, server.calls)
    except Exception:  # noqa: BLE001 - recorded as the unit's failure; the other unit still runs
        (udir / "agent.log").write_text(traceback.format_exc())
        rc = 1
    (udir / "agent.rc").write_text(f"{rc}\n")
    try:
        asked = [r["instance_id"] for r in slice_rows(rows, cfg.instance_slice)]
        convert_predictions(udir / "agent" / "preds.json", udir / "preds.jsonl", asked)
        grade(udir / "preds.jsonl", tasks, repo, udir / "grading", bench, instance_ids=asked)
        grc, text = 0, ""
    except Exception:  # noqa: BLE001
        grc, text = 1, traceback.format_exc()
    (udir / "grade.log").write_text(text)
    (udir / "grade.rc").write_text(f"{grc}\n")


def run_local(cfg: Any, checkpoint: str | Path | None, output: str | Path, timeout: int = 600) -> dict[str, Any]:
    """The embedded task set on CPU into OUTPUT, one unit per benchmark of CFG (a SweBenchConfig whose
    benchmarks are ``local`` (CHECKPOINT, an HF export, served by :class:`ChatServer`) and/or
    ``local_oracle``): tasks, agent, predictions completed to the instances asked for, grading, collection.
    A rerun with the same checkpoint content and settings reuses the results. Returns the results."""

    cfg.validate()
    if not all(BENCHMARKS[b].oracle for b in cfg.benchmarks):  # a unit serves the checkpoint
        if checkpoint is None or not (Path(checkpoint) / "config.json").is_file():
            raise ConfigError(
                f"benchmarks=[local] serves --checkpoint, an HF model directory (config.json); got {checkpoint!r}"
            )
        check_context(cfg, checkpoint)
    else:
        checkpoint = None
    out = Path(output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    if data.exists():
        shutil.rmtree(data)
    repo, tasks = build_tasks(data)

    inputs = {
        "checkpoint": None if checkpoint is None else content_id(checkpoint),
        "tasks": content_id(tasks / "test.jsonl"),
    }
    want = make_stamp("swebench local", inputs, cfg.to_dict())  # with the code: a fixed oracle is another run
    old = read_stamp(out / STAMP)
    done = read_stamp(out / RESULTS_FILE) if old is not None and not stale_fields(old, want) else None
    if done and all(done.get(b, {}).get("rate") is not None for b in cfg.benchmarks):
        log.info("swebench local: %s already ran on this checkpoint with these settings; reused", out)
        return done
    (out / STAMP).unlink(missing_ok=True)
    cfg.save_yaml(out / "swebench_config.yaml")  # collect reads the units asked for from it
    rows = [json.loads(line) for line in (tasks / "test.jsonl").read_text().splitlines() if line.strip()]
    for bench in cfg.benchmarks:
        _unit(cfg, bench, out / bench, tasks, repo, rows, checkpoint, timeout)
    results = collect_results(out)  # with each unit's parseable-action rate (its server.jsonl)
    # what the results are of, graded or not (a rerun reuses them only when every rate is known, above)
    (out / STAMP).write_text(json.dumps(want, indent=1))
    return results
