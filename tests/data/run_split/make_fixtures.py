"""Writes the run-split fixtures (see README.md here); deterministic: rerun after editing a row.

    .venv/bin/python tests/data/run_split/make_fixtures.py

Task instances of acme/calc (and two pull requests of acme/web) in the layouts real producers write, their ids
spelled every way the readers accept: SWE-agent trajectories of GitHub-issue runs (``Owner__Repo-iN``),
OpenAI-messages trace rows (REST API URLs, ``owner/repo#N``, SWE-bench ids), SWE-bench task rows (``owner/repo#N``,
a PR URL, an API URL, ``issue_numbers`` linking the issue a PR resolves) and GitHub REST pull requests
(``linked_issues``, ``merge_commit_sha``). The commits input is a git history the test builds (tests/
test_run_split.py), with one pull request's merge commit and one task row's patch in it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


def fix(n: int) -> tuple[str, str]:
    """(path, hunk) of the fix of task n: its function's guard, unique to n (a patch key names one change)."""
    return "calc.py", f"@@ -{n},2 +{n},2 @@\n def op{n}(x):\n-    return {n} / x\n+    return safe_div({n}, x)\n"


def patch(n: int) -> str:
    path, hunk = fix(n)
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{hunk}"


def issue(n: int) -> str:
    return f"Fix issue {n}: `calc.op{n}(0)` raises ZeroDivisionError instead of CalcError."


def swe_agent_issue_run(n: int) -> dict:
    """SWE-agent 1.x ``<id>/<id>.traj`` of a run on a GitHub issue URL (``--env.repo.github_url``/``--problem_statement
    .github_url``): the id, ``Owner__Repo-i<issue>``, is only in the file name."""
    steps = [
        (f"Let me look at op{n}.", f"grep -n 'def op{n}' calc.py", f"{n}:def op{n}(x):"),
        ("I'll guard the zero.", f"sed -i 's/return {n} \\/ x/return safe_div({n}, x)/' calc.py", ""),
        ("Done.", "submit", patch(n)),
    ]
    history = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer.",
         "agent": "main", "message_type": "system_prompt"},
        {"role": "user", "content": f"<uploaded_files>/repo</uploaded_files>\n{issue(n)}", "agent": "main",
         "message_type": "observation"},
    ]
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
            "info": {"swe_agent_version": "1.1.0", "exit_status": "submitted", "submission": patch(n),
                     "model_stats": {"api_calls": 3}},
            "replay_config": json.dumps({"agent": {"model": {"name": "deterministic"}}}), "environment": "swe_main"}


def openai_row(spelled: str, n: int) -> dict:
    """An OpenAI-messages trace row (OpenHands' export, nvidia/Open-SWE-Traces)."""
    tool = {"type": "function", "function": {"name": "execute_bash", "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
    call = {"id": "call_1", "type": "function",
            "function": {"name": "execute_bash", "arguments": json.dumps({"command": f"grep -n op{n} calc.py"})}}
    return {"instance_id": spelled, "repo": "acme/calc", "license": "MIT", "resolved": 1, "tools": [tool],
            "messages": [{"role": "system", "content": "You are OpenHands agent."},
                         {"role": "user", "content": issue(n)},
                         {"role": "assistant", "content": f"Searching for op{n}.", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "call_1", "name": "execute_bash",
                          "content": f"{n}:def op{n}(x):"},
                         {"role": "assistant", "content": f"op{n} divides by x; guarding it fixes the issue."}]}


def task_row(spelled: str, n: int, **extra) -> dict:
    """A SWE-bench task row (princeton-nlp/SWE-bench's columns; ``issue_numbers`` from its collection stage)."""
    return {"repo": "acme/calc", "instance_id": spelled, "base_commit": f"{n:040x}", "patch": patch(n),
            "test_patch": "", "problem_statement": issue(n), "hints_text": "", "created_at": "2024-01-02T03:04:05Z",
            "version": "1.0", "FAIL_TO_PASS": json.dumps([f"test_op{n}_zero"]), "PASS_TO_PASS": "[]",
            "environment_setup_commit": f"{n:040x}", **extra}


def pull(repo: str, n: int, **extra) -> dict:
    """A GitHub REST pull request (``GET /repos/{owner}/{repo}/pulls/{n}`` with its ``files`` joined)."""
    path, hunk = fix(n)
    return {"repo": repo, "number": n, "title": f"Guard op{n} against zero", "state": "closed", "merged": True,
            "body": f"Guards op{n}.", "user": {"login": "dev", "type": "User"},
            "base": {"ref": "main", "sha": f"{n:040x}"}, "head": {"ref": f"fix-{n}", "sha": f"{n + 1000:040x}"},
            "files": [{"filename": path, "status": "modified", "additions": 1, "deletions": 1, "patch": hunk}],
            "comments": [], "reviews": [], **extra}


def main() -> None:
    for d in ("traces", "pulls"):
        shutil.rmtree(HERE / d, ignore_errors=True)
    for n in (30, 82):  # issue runs: #30 resolved by PR #60 (task row), #82 by PR #31 (pull request)
        name = f"Acme__Calc-i{n}"
        (HERE / "traces" / name).mkdir(parents=True)
        (HERE / "traces" / name / f"{name}.traj").write_text(json.dumps(swe_agent_issue_run(n), indent=2) + "\n")
    rows = [openai_row("https://api.github.com/repos/Acme/Calc/pulls/64", 64), openai_row("acme/calc#31", 31),
            openai_row("Acme__Calc-81", 81), openai_row("acme/calc#33", 33)]
    (HERE / "traces" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (HERE / "pulls").mkdir()
    tasks = [task_row("acme__calc-60", 60, issue_numbers=["30"]), task_row("acme/calc#64", 64),
             task_row("https://github.com/acme/calc/pull/81", 81),
             task_row("https://api.github.com/repos/Acme/Calc/pulls/33", 33)]
    (HERE / "pulls" / "task_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tasks))
    # #64's merge commit is the test's git history's: FIX_SHA is replaced by the sha of the commit it builds
    prs = [pull("Acme/Calc", 31, linked_issues=[{"number": 82, "title": "op82 divides by zero", "body": issue(82)}]),
           pull("Acme/Calc", 64, merge_commit_sha="FIX_SHA"), pull("Acme/Calc", 32),
           pull("acme/web", 4), pull("acme/web", 5)]
    (HERE / "pulls" / "prs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in prs))


if __name__ == "__main__":
    main()
