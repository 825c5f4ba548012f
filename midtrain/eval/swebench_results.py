"""Collecting a SWE-bench run: each unit's grader report, failed steps with their cause and flags, into
OUTPUT/swebench_results.json, and the exit status they make."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from midtrain.eval.benchmarks import BENCHMARKS, Benchmark
from midtrain.eval.config import HARNESSES, SweBenchConfig
from midtrain.eval.predictions import read_instances
from midtrain.eval.swebench_plan import units
from midtrain.eval.swebench_scripts import INSTANCES, SERVER_FAILED, SERVER_LOG, STEPS
from midtrain.eval.swebench_stamp import run_pending
from midtrain.formats.outputs import OutputRefused

log = logging.getLogger(__name__)

RESULTS_FILE = "swebench_results.json"
EMPTY_PATCH_FLAG = 0.5  # a unit with more empty patches than this share is flagged in its results and the report


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        tail = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()][-lines:]
    except OSError:
        return ""
    return " | ".join(t[:240] for t in tail)


def step_failures(udir: Path, server_failed: str | None) -> list[dict[str, Any]]:
    """The failed steps of one unit, each with its cause: exit status and the end of its log (run.sh keeps
    <step>.rc and <step>.log beside the scripts), or the server's failure when the agents never ran."""
    failures = []
    for step in STEPS:
        rc_file, log_file = udir / f"{step}.rc", udir / f"{step}.log"
        if rc_file.is_file():
            rc = rc_file.read_text().strip()
            if rc != "0":
                failures.append(
                    {
                        "step": step,
                        "exit": int(rc) if rc.lstrip("-").isdigit() else rc,
                        "cause": _log_tail(log_file) or f"{step}.sh exited {rc}",
                        "log": str(log_file),
                    }
                )
        elif server_failed and step == "agent":
            failures.append({"step": step, "cause": server_failed})
    return failures


def collect_results(output: str | Path) -> dict[str, dict[str, Any]]:
    """Read each benchmark x harness's grading report under OUTPUT and write OUTPUT/swebench_results.json.

    Keys: the benchmark name for mini-swe-agent (OUTPUT/<bench>/), ``<bench>/<harness>`` for another harness
    (OUTPUT/<bench>/<harness>/). Every unit the run's swebench_config.yaml asked for gets an entry: ``total``
    is the instances asked for (instances.txt), ``failures`` lists failed steps with their cause, and a unit
    without a readable report has ``rate: null`` (unknown, never 0); one none of whose steps has run yet is
    also ``pending``.
    """
    out = Path(output)
    pending = run_pending(out)
    if pending:
        raise OutputRefused(f"{pending}; run it (sbatch {out / 'swebench.sbatch'}) before --collect")
    cfg_file = out / "swebench_config.yaml"
    run_cfg = SweBenchConfig.from_yaml(cfg_file) if cfg_file.is_file() else None
    if run_cfg is not None:
        planned, scanned = units(run_cfg), False
    else:  # results of a run written elsewhere: every unit that has a grading directory
        planned = [(n if h == "mini-swe-agent" else f"{n}/{h}", n, h) for n in BENCHMARKS for h in HARNESSES]
        scanned = True
    server = (out / SERVER_FAILED).read_text().strip() if (out / SERVER_FAILED).is_file() else None
    results: dict[str, dict[str, Any]] = {}
    for key, name, harness in planned:
        udir = out / name if harness == "mini-swe-agent" else out / name / harness
        if scanned and not (udir / "grading").is_dir():
            continue
        results[key] = _unit_result(key, BENCHMARKS[name], harness, udir, server)
        if (udir / SERVER_LOG).is_file():  # a unit served on CPU: what share of replies an agent could act on
            fmt = run_cfg.action_format if run_cfg is not None else "tool_calls"
            results[key]["actions"] = action_rate(udir / SERVER_LOG, fmt)
    (out / RESULTS_FILE).write_text(json.dumps(results, indent=2))
    return results


def action_rate(server_log: Path, action_format: str) -> dict[str, Any]:
    """How many of the model's replies (SERVER_LOG, one JSON line a call) an agent could act on: exactly one
    ```bash block (action_format=text) or at least one tool call; a rate a small model registers below 1."""
    rows = [json.loads(x) for x in server_log.read_text().splitlines() if x.strip()] if server_log.is_file() else []
    rows = [r for r in rows if "completion_tokens" in r]
    ok = sum((r.get("bash_blocks") == 1) if action_format == "text" else bool(r.get("tool_calls")) for r in rows)
    return {"replies": len(rows), "parseable": ok, "rate": ok / len(rows) if rows else None, "format": action_format}


def exit_status(results: dict[str, dict[str, Any]]) -> int:
    """The exit status of a SWE-bench run or collection: 1 when a unit that ran has a failed step, a missing or
    unreadable report, or graded nothing (rate null), else 0. A pending unit (none of its steps has run yet)
    fails nothing: collecting a run still in the queue says so in its results, not as an error."""
    return (
        1 if any((r.get("failures") or r.get("rate") is None) and not r.get("pending") for r in results.values()) else 0
    )


def _unit_result(key: str, bench: Benchmark, harness: str, udir: Path, server: str | None) -> dict[str, Any]:
    """One unit's counts from its grader's report, its failed steps with their cause, and flags."""
    asked = read_instances(udir / INSTANCES)
    failures = step_failures(udir, server)
    result: dict[str, Any] | None = None
    try:
        result = bench.grader.report(
            bench, udir, bench.name if harness == "mini-swe-agent" else f"{bench.name}-{harness}", asked
        )
    except (ValueError, json.JSONDecodeError) as e:
        failures.append({"step": "collect", "cause": f"unreadable report: {e}"})
    if result is None:
        pending = not failures and not any((udir / f"{s}.rc").is_file() for s in STEPS)  # nor a server
        if not failures:
            why = " (not run yet)" if pending else ""
            failures.append({"step": "grade", "cause": f"no grading report in {udir / 'grading'}{why}"})
        result = {"resolved": 0, "total": len(asked) if asked is not None else 0, "rate": None}
        if pending:
            result["pending"] = True
    if asked is not None:
        result["asked"] = len(asked)
        if result["total"] != len(asked):
            log.warning(
                "swebench %s: the report covers %d instances, %d were asked for", key, result["total"], len(asked)
            )
    empty = result.get("empty_patch", 0)
    if result.get("total") and empty / result["total"] > EMPTY_PATCH_FLAG:  # e.g. the server died mid-run
        result["flag"] = f"mostly empty patches: {empty} of {result['total']}"
        log.warning("swebench %s: %s (did the model server stop?)", key, result["flag"])
    if failures:
        result["failures"] = failures
        log.error("swebench %s: %s", key, "; ".join(f"{f['step']}: {f['cause']}" for f in failures))
    return result
