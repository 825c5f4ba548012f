"""DeepSWE (datacurve-ai/deep-swe): 113 long-horizon tasks in the Harbor task format, graded by Pier.

A task is a directory: task.toml (repository, base commit, language, the prebuilt image, limits),
instruction.md (the prompt), environment/, tests/ (the verifier) and solution/. Pier (datacurve-pier, a
Harbor fork) runs mini-swe-agent inside the task's sandbox against our vLLM server, then grades in a separate
verifier environment: each trial leaves JOBS/<job>/<trial>/result.json whose ``verifier_result.rewards``
holds the binary ``reward`` (1 = resolved). Harbor and Pier need Python >= 3.12, so the job makes its own
environment for them; the project's stays as it is.
"""

from __future__ import annotations

import json
import logging
import tomllib
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

REPO = "datacurve-ai/deep-swe"
REF = "435ee89ec2f2e2289f33b0da4f992f0b7b7266b9"  # the commit the bundled task list was read from
PIER = "datacurve-pier>=0.3.1"  # v1.1 tasks grade in a separate verifier environment (0.3.0 cannot)
JOB = "midtrain-deepswe"


def read_tasks(tasks_dir: str | Path) -> list[dict[str, Any]]:
    """Every Harbor task under TASKS_DIR (a directory with task.toml), by task id, as instance rows."""
    rows = []
    for toml_file in sorted(Path(tasks_dir).glob("*/task.toml")):
        try:
            task = tomllib.loads(toml_file.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{toml_file}: not TOML ({e})") from None
        meta = task.get("metadata") or {}
        rows.append(
            {
                "instance_id": meta.get("task_id") or toml_file.parent.name,
                "task_name": (task.get("task") or {}).get("name", ""),
                "repo": meta.get("repository_url", ""),
                "base_commit": meta.get("base_commit_hash", ""),
                "language": meta.get("language", ""),
                "image": (task.get("environment") or {}).get("docker_image", ""),
            }
        )
    if not rows:
        raise ValueError(f"{tasks_dir}: no Harbor tasks (*/task.toml) there")
    return rows


def agent_config(mini_cfg: dict[str, Any], api_base: str) -> dict[str, Any]:
    """The layer Pier puts over mini-swe-agent's mini.yaml inside the sandbox: our model, limits and endpoint
    (Pier allowlists the URLs it finds here through the task's no-network policy)."""
    model = dict(mini_cfg["model"])
    model["model_kwargs"] = {**model.get("model_kwargs", {}), "api_base": api_base}
    return {"agent": {"step_limit": mini_cfg["agent"]["step_limit"]}, "model": model}


def _task_id(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def parse_trials(jobs_dir: str | Path, instances: list[str] | None) -> dict[str, Any]:
    """Pier's trial results -> counts over the tasks asked for.

    reward 1 = resolved, 0 = failed; a trial with an exception and no reward, a negative reward (the
    verifier's crash sentinel) or no trial at all is an error (``error_ids``), never a failed task.
    """
    outcome: dict[str, str] = {}
    for result in sorted(Path(jobs_dir).glob("*/result.json")):
        try:
            r = json.loads(result.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{result}: not JSON ({e})") from None
        task = _task_id(str(r.get("task_name") or result.parent.name))
        rewards = (r.get("verifier_result") or {}).get("rewards") or {}
        reward = rewards.get("reward")
        if not isinstance(reward, (int, float)) or reward < 0:
            outcome.setdefault(task, "error")
        elif reward >= 1:
            outcome[task] = "resolved"  # any attempt (pier -k) that resolves it
        elif outcome.get(task) != "resolved":
            outcome[task] = "failed"
    ids = list(instances) if instances is not None else sorted(outcome)
    errors = [i for i in ids if outcome.get(i, "error") == "error"]
    resolved = sum(outcome.get(i) == "resolved" for i in ids)
    if errors:
        log.error(
            "deepswe: %d of %d tasks not graded (no trial, an exception or the verifier's crash), e.g. %s",
            len(errors),
            len(ids),
            errors[:3],
        )
    graded = len(ids) - len(errors)  # none graded: the rate is unknown (null), never a measured 0
    return {
        "resolved": resolved,
        "total": len(ids),
        "rate": resolved / len(ids) if graded else None,
        "completed": len(ids) - len(errors),
        "failed": len(ids) - len(errors) - resolved,
        "errors": len(errors),
        "error_ids": errors,
        "report": str(jobs_dir),
    }
