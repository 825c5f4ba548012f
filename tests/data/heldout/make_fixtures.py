"""Writes the held-out-by-task fixtures (see README.md here); deterministic: rerun after editing a row.

    .venv/bin/python tests/data/heldout/make_fixtures.py

The mini-swe-agent trajectories are written by the installed mini-swe-agent itself (its DefaultAgent with its
DeterministicModel and LocalEnvironment, saved by ``agent.save`` with the extra ``instance_id`` its SWE-bench
runner adds); the SWE-agent ``.traj`` files, OpenAI-messages rows, SWE-bench task rows and GitHub pull
request records are written here in those producers' layouts. 16 task instances of one repository
(acme/calc #1..#16), spelled several ways across two trace sets and the pulls inputs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
INSTANCES = range(1, 17)


def spelling(n: int, kind: int) -> str:
    """Instance n as producers spell it: SWE-bench's, a mixed-case one, owner/name#N, a pull URL."""
    return [f"acme__calc-{n}", f"Acme__Calc-{n}", f"acme/calc#{n}", f"https://github.com/acme/calc/pull/{n}",
            f"acme/calc/pull/{n}"][kind % 5]


def task(n: int) -> str:
    return f"Fix issue {n}: `calc.op{n}(0)` raises ZeroDivisionError instead of CalcError."


def swe_agent_traj(n: int) -> dict:
    """SWE-agent 1.x ``<instance>/<instance>.traj``: trajectory steps, the model's history, info, config."""
    steps = [(f"Let me look at op{n}.", f"grep -n 'def op{n}' calc.py", f"{n}:def op{n}(x):"),
             ("I'll guard the zero.", "sed -i 's/return 1 \\/ x/return safe_div(1, x)/' calc.py", ""),
             ("Done.", "submit", "diff --git a/calc.py b/calc.py\n-    return 1 / x\n+    return safe_div(1, x)")]
    history = [{"role": "system", "content": "You are a helpful assistant that can interact with a computer.",
                "agent": "main", "message_type": "system_prompt"},
               {"role": "user", "content": f"<uploaded_files>/repo</uploaded_files>\n{task(n)}", "agent": "main",
                "message_type": "observation"}]
    trajectory = []
    for thought, action, observation in steps:
        response = f"{thought}\n\n```\n{action}\n```"
        trajectory.append({"action": action, "observation": observation, "response": response, "thought": thought,
                           "execution_time": 0.1, "state": {"working_dir": "/repo"}, "query": [], "extra_info": {}})
        history.append({"role": "assistant", "content": response, "thought": thought, "action": action,
                        "agent": "main", "message_type": "action"})
        history.append({"role": "user", "content": f"OBSERVATION:\n{observation}", "agent": "main",
                        "message_type": "observation"})
    return {"trajectory": trajectory, "history": history[:-1],
            "info": {"swe_agent_version": "1.1.0", "exit_status": "submitted",
                     "submission": steps[-1][2], "model_stats": {"api_calls": 3}},
            "replay_config": json.dumps({"agent": {"model": {"name": "deterministic"}}}),
            "environment": "swe_main"}


def mini_swe_agent_traj(n: int, spelled: str, dest: Path) -> None:
    """A trajectory run and saved by the installed mini-swe-agent (as its swebench runner saves one)."""
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import DeterministicModel, make_output

    outputs = [make_output(f"Let me look at op{n}.\n\n```bash\necho 'def op{n}(x): return 1 / x'\n```",
                           [{"command": f"echo 'def op{n}(x): return 1 / x'"}]),
               make_output("Guarded; submitting.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
                           [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}])]
    for o in outputs:
        o["extra"]["timestamp"] = 0.0  # deterministic files
    with tempfile.TemporaryDirectory() as cwd:
        agent = DefaultAgent(DeterministicModel(outputs=outputs), LocalEnvironment(cwd=cwd, env={"PAGER": "cat"}),
                             system_template="You are a helpful assistant that can interact with a computer.",
                             instance_template="{{task}}", step_limit=5, cost_limit=0)
        info = agent.run(task(n))
        data = agent.serialize({"info": {"exit_status": info.get("exit_status"), "submission": info.get("submission")},
                                "instance_id": spelled})
    for m in data["messages"]:
        m.get("extra", {}).pop("timestamp", None)
        m.get("extra", {}).pop("duration", None)
    data["info"]["config"]["environment"]["cwd"] = "/repo"
    data["info"]["mini_version"] = "(installed)"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(data, indent=2))  # what agent.save writes


def openai_row(n: int, spelled: str) -> dict:
    """An OpenAI-messages row (OpenHands exports, nvidia/Open-SWE-Traces): tool calls and tool turns."""
    call = {"id": f"call_{n}", "type": "function",
            "function": {"name": "execute_bash", "arguments": json.dumps({"command": f"grep -n op{n} calc.py"})}}
    return {"instance_id": spelled, "repo": "acme/calc", "license": "MIT", "resolved": n % 2,
            "tools": [{"type": "function", "function": {"name": "execute_bash", "description": "Run a command.",
                                                        "parameters": {"type": "object", "properties": {
                                                            "command": {"type": "string"}}, "required": ["command"]}}}],
            "messages": [{"role": "system", "content": "You are OpenHands agent."},
                         {"role": "user", "content": task(n)},
                         {"role": "assistant", "content": f"Searching for op{n}.", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": f"call_{n}", "name": "execute_bash",
                          "content": f"{n}:def op{n}(x):"},
                         {"role": "assistant", "content": f"op{n} divides by x; guarding it fixes issue {n}."}]}


def task_row(n: int) -> dict:
    """A SWE-bench task row (princeton-nlp/SWE-bench's columns)."""
    patch = (f"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -{n},2 +{n},2 @@\n def op{n}(x):\n"
             f"-    return 1 / x\n+    return safe_div(1, x)\n")
    test = (f"diff --git a/test_calc.py b/test_calc.py\n--- a/test_calc.py\n+++ b/test_calc.py\n@@ -0,0 +1,2 @@\n"
            f"+def test_op{n}_zero():\n+    assert raises(CalcError, op{n}, 0)\n")
    return {"repo": "acme/calc", "instance_id": f"acme__calc-{n}", "base_commit": f"{n:040x}",
            "patch": patch, "test_patch": test, "problem_statement": task(n), "hints_text": f"op{n} is in calc.py",
            "created_at": "2024-01-02T03:04:05Z", "version": "1.0", "FAIL_TO_PASS": json.dumps([f"test_op{n}_zero"]),
            "PASS_TO_PASS": json.dumps([]), "environment_setup_commit": f"{n:040x}"}


def pull_record(n: int) -> dict:
    """A GitHub REST pull request (GET /repos/{owner}/{repo}/pulls/{n}, files and comments joined)."""
    return {"repo": "Acme/Calc", "number": n, "title": f"Guard op{n} against zero", "state": "closed",
            "merged": True, "body": f"Fixes the ZeroDivisionError of op{n}.", "user": {"login": "dev", "type": "User"},
            "base": {"ref": "main", "sha": f"{n:040x}"}, "head": {"ref": f"fix-{n}", "sha": f"{n + 100:040x}"},
            "files": [{"filename": "calc.py", "status": "modified", "additions": 1, "deletions": 1,
                       "patch": f"@@ -{n},2 +{n},2 @@\n def op{n}(x):\n-    return 1 / x\n+    return safe_div(1, x)"}],
            "comments": [], "reviews": []}


def main() -> None:
    for d in ("set_a", "set_b", "pulls"):
        shutil.rmtree(HERE / d, ignore_errors=True)
    # set A: SWE-agent .traj for #1-#8 (SWE-bench's spelling, some mixed-case), mini-swe-agent for #9-#16
    for n in INSTANCES:
        if n <= 8:
            name = spelling(n, n % 2)
            path = HERE / "set_a" / name / f"{name}.traj"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(swe_agent_traj(n), indent=2))
        else:
            mini_swe_agent_traj(n, spelling(n, 2), HERE / "set_a" / f"task{n}" / f"task{n}.traj.json")
    # set B: OpenAI-messages rows for every instance (other spellings), and a second attempt of #4-#6 by mini
    rows = [openai_row(n, spelling(n, 2 + n % 3)) for n in INSTANCES]
    (HERE / "set_b").mkdir()
    (HERE / "set_b" / "openhands.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for n in (4, 5, 6):
        mini_swe_agent_traj(n, spelling(n, 4), HERE / "set_b" / f"retry{n}" / f"retry{n}.traj.json")
    (HERE / "pulls").mkdir()
    (HERE / "pulls" / "task_rows.jsonl").write_text("".join(json.dumps(task_row(n)) + "\n" for n in INSTANCES))
    (HERE / "pulls" / "prs.jsonl").write_text("".join(json.dumps(pull_record(n)) + "\n" for n in (5, 10, 20, 21)))


if __name__ == "__main__":
    main()
