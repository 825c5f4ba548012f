"""Where each protocol step leaves its numbers, and how the report reads them back.

One checkpoint's protocol directory holds ``sft/sft_result.json`` (the probe), ``proxy/proxy_results.json``
and ``swebench/swebench_results.json``; a probe or proxy run repeated with other seeds adds ``sft-s<SEED>/``
and ``proxy-s<SEED>/`` beside them (the report shows mean ± spread over them). The report reads the steps the
run's config names (``steps``; never a glob of what lies there) and shows a result only when it is complete
and its input chain ends at the column's checkpoint: the probe's and the proxy's stamps record the content id
of the checkpoint they started from, SWE-bench's the one of the HF export the probe recorded. Anything else is
``missing`` with the reason, listed, and the report command exits non-zero.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midtrain.eval.swebench_stamp import run_pending
from midtrain.formats.checkpoints import resolve_checkpoint
from midtrain.formats.outputs import REUSE, claim, write_json
from midtrain.formats.rundir import METRICS, PROXY_RESULT, SFT_RESULT, SWEBENCH_RESULT, read_metrics, run_dir_of
from midtrain.formats.stamp import content_id, read_stamp

log = logging.getLogger(__name__)

LM_EVAL_RESULT = "lm_eval_results.json"


def scored_result(
    stage: str, path: Path, want: dict[str, Any], score: Callable[[], dict[str, Any] | None], hold: bool = True
) -> dict[str, Any]:
    """A scoring step's result file (the proxy's, lm-eval's) in the output PATH's directory, claimed for STAGE
    (formats.outputs: reused on an equal complete stamp, else scored again): SCORE()'s fields after WANT's, with
    the seconds scoring took, written to PATH. HOLD False: another rank of the scoring job, which follows the
    holder's decision; SCORE returns None where this process writes nothing (lm-eval's non-zero ranks): {}."""
    with claim(path.parent, stage, want, hold=hold) as c:
        done = read_stamp(path) if c.action == REUSE else None
        if done is not None:
            log.info("%s is complete for this checkpoint's content and config; skipped", path)
            return done
        t0 = time.time()
        fields = score()
        if fields is None:
            return {}
        result = {**want, **fields, "seconds": round(time.time() - t0, 1)}
        if c.holds:
            write_json(path, result)
            c.complete()
    return result


STEP_RESULTS = {"sft": SFT_RESULT, "proxy": PROXY_RESULT, "lm_eval": LM_EVAL_RESULT, "swebench": SWEBENCH_RESULT}
SWEBENCH_STAMPS = ("swebench_stamp.json", "local_stamp.json")  # eval.swebench_stamp.RUN_STAMP, eval.local_run.STAMP


@dataclass
class CheckpointResults:
    name: str
    root: Path
    sft: dict[str, Any] | None = None
    proxy: dict[str, Any] | None = None
    swebench: dict[str, Any] | None = None
    lm_eval: dict[str, Any] | None = None
    sft_runs: list[dict[str, Any]] = field(default_factory=list)  # the probe over every seed (sft/ first)
    proxy_runs: list[dict[str, Any]] = field(default_factory=list)  # the proxy evals over every seed (proxy/ first)
    sft_curve: list[dict[str, Any]] = field(default_factory=list)  # the probe run's metrics.jsonl
    midtrain_curve: list[dict[str, Any]] = field(default_factory=list)  # the checkpoint's own run, if known
    problems: list[str] = field(default_factory=list)
    # what was asked for and is not shown: "sft", "proxy", "swebench/<unit>" -> why (the cell reads it)
    missing: dict[str, str] = field(default_factory=dict)
    checkpoint_id: str | None = None  # the content id every cell's chain must end at (None: unknown, unchecked)


def _read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    if not path.exists():
        problems.append(f"missing {path}")
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        problems.append(f"unreadable {path}: {e}")
        return None
    if not isinstance(data, dict):
        problems.append(f"unexpected content in {path} (not an object)")
        return None
    return data


def _run_dir_of(checkpoint: str | Path) -> Path | None:
    """The run directory a checkpoint path belongs to (run_dir or run_dir/checkpoints/iter_*)."""
    run = run_dir_of(checkpoint)
    return run if (run / METRICS).exists() else None


def seed_dir(step_dir: str, seed: int | None) -> str:
    """``sft`` for the first (or only) seed, ``sft-s<SEED>`` for each further seed."""
    return step_dir if seed is None else f"{step_dir}-s{seed}"


def _seeded(run: dict[str, Any] | None, seed_dir: str) -> dict[str, Any] | None:
    """RUN with the directory of its seed (``sft``, ``sft-s4322``): what pairs it with another checkpoint's."""
    if isinstance(run, dict):
        run.setdefault("seed_dir", seed_dir)
    return run


def step_kind(step: str) -> str:
    """``sft`` for ``sft`` and ``sft-s7``: which result a step directory holds."""
    return step.split("-s", 1)[0]


def default_steps(root: Path) -> list[str]:
    """The steps a report reads without a config naming them: the probe, and each eval that left a directory
    (never the seed directories: which seeds belong to the run only its config says)."""
    return ["sft", *(s for s in ("proxy", "lm_eval", "swebench") if (root / s).exists())]


def swebench_problems(results: dict[str, Any], where: Path) -> list[str]:
    """A failed step or an instance the grader could not grade, said in the report (a rate alone hides it)."""
    out = []
    for key, r in results.items():
        if not isinstance(r, dict):
            continue
        for f in r.get("failures") or []:
            out.append(f"swebench {key} ({where}): {f.get('step')} failed: {f.get('cause')}")
        if r.get("errors"):
            out.append(
                f"swebench {key} ({where}): {r['errors']} of {r.get('total')} instances not graded "
                f"(errors, counted unresolved), e.g. {', '.join((r.get('error_ids') or [])[:3])}"
            )
        if r.get("rate") is None:
            out.append(f"swebench {key} ({where}): nothing graded, the rate is unknown (n/a, not 0)")
        if r.get("flag"):
            out.append(f"swebench {key} ({where}): {r['flag']} (did the model server stop mid-run?)")
    return out


def ungraded(unit: dict[str, Any]) -> str | None:
    """Why a SWE-bench unit's rate is not a measured one (the grader's reason), or None when every instance
    asked for was graded."""
    if unit.get("pending"):
        return "not run yet"
    causes = "; ".join(f"{f.get('step')}: {f.get('cause')}" for f in unit.get("failures") or [])
    if unit.get("errors"):
        ids = ", ".join((unit.get("error_ids") or [])[:3])
        return (
            f"{unit['errors']} of {unit.get('total')} instances not graded"
            + (f" ({ids})" if ids else "")
            + (f"; {causes}" if causes else "")
        )
    if unit.get("rate") is None:
        return causes or "nothing graded"
    return None


def input_id(kind: str, record: dict[str, Any]) -> str | None:
    """The content id of the checkpoint a result says it was made from (None: it records none)."""
    raw = record.get("inputs")
    inputs: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if kind == "sft":
        return inputs.get("start") or record.get("start_id")
    return inputs.get("checkpoint")


def _unfinished(kind: str, record: dict[str, Any]) -> str | None:
    if kind == "sft" and record.get("exit_code", 0) != 0:
        return f"the probe stopped before its last step (exit {record.get('exit_code')})"
    return None


def _chain(kind: str, record: dict[str, Any], want: str | None, of: str) -> str | None:
    """Why RECORD does not end at the content id WANT (OF: what WANT is the id of), None when it does or when
    WANT is unknown."""
    if want is None:
        return None
    got = input_id(kind, record)
    if got is None:
        return f"it records no content id of the checkpoint it was made from (an older midtrain); {of} is {want}"
    if got != want:
        return f"made from checkpoint content {got}, not {of} ({want}): a result of an earlier run"
    return None


def _swebench_stamp(root: Path) -> dict[str, Any]:
    for name in SWEBENCH_STAMPS:
        stamp = read_stamp(root / name)
        if stamp is not None:
            return stamp
    return {}


def _load_step(res: CheckpointResults, step: str, want: str | None, of: str) -> dict[str, Any] | None:
    """STEP's result when it is complete and made from WANT; else None with res.missing[kind] set."""
    kind = step_kind(step)
    where = res.root / step / STEP_RESULTS[kind]
    record = _read_json(where, res.problems)
    why: str | None
    if record is None:
        why = f"{step}/{STEP_RESULTS[kind]} " + ("unreadable" if where.exists() else "not written")
    else:
        chained = {**record, "inputs": _swebench_stamp(res.root / step).get("inputs")} if kind == "swebench" else record
        why = _unfinished(kind, record) or _chain(kind, chained, want, of)
        if kind == "swebench" and chained.get("inputs") and chained["inputs"].get("checkpoint") is None:
            why = None  # the oracle alone: it grades no model
        if kind == "swebench":
            why = run_pending(res.root / step) or why
    if why is None:
        return record
    res.missing.setdefault(kind, why if why.startswith(f"{step}/") else f"{step}: {why}")
    res.problems.append(f"{res.name} {step}: missing: {why}")
    return None


def _column_id(checkpoint: str | Path | None, root: Path) -> str | None:
    """The content id of the column's checkpoint: the one named, else the one the probe (or the proxy) records."""
    if checkpoint is not None:
        try:
            return content_id(resolve_checkpoint(checkpoint))
        except (FileNotFoundError, OSError):
            return None
    for kind in ("sft", "proxy"):
        rec = read_stamp(root / kind / STEP_RESULTS[kind])
        if rec is not None and input_id(kind, rec):
            return input_id(kind, rec)
    return None


def load_checkpoint_results(
    name: str, root: str | Path, checkpoint: str | Path | None = None, steps: list[str] | None = None
) -> CheckpointResults:
    """The results of one column: STEPS (default :func:`default_steps`) of the protocol directory ROOT, each
    shown only when complete and made from CHECKPOINT's content (None: the content the probe records)."""
    root = Path(root)
    res = CheckpointResults(name=name, root=root)
    steps = steps or default_steps(root)
    res.checkpoint_id = _column_id(checkpoint, root)
    if checkpoint is not None and res.checkpoint_id is None:
        res.missing["checkpoint"] = f"{checkpoint}: no complete checkpoint there"
        res.problems.append(f"{name}: missing: {res.missing['checkpoint']}")
    if not root.is_dir() or "checkpoint" in res.missing:
        why = res.missing.get("checkpoint") or f"no protocol directory {root}"
        if "checkpoint" not in res.missing:
            res.problems.append(why)
        for kind in dict.fromkeys(map(step_kind, steps)):
            res.missing[kind] = why
        return res
    want, of = res.checkpoint_id, "this column's checkpoint"
    runs: dict[str, list[dict[str, Any]]] = {}
    first: dict[str, dict[str, Any]] = {}  # the plain step directory's result (sft/, proxy/)
    for step in [s for s in steps if step_kind(s) != "swebench"]:
        record = _load_step(res, step, want, of)
        if record is not None:
            runs.setdefault(step_kind(step), []).append(_seeded(record, step) or record)
            if step == step_kind(step):
                first[step] = record
    res.sft_runs, res.proxy_runs = runs.get("sft", []), runs.get("proxy", [])
    res.sft, res.proxy, res.lm_eval = first.get("sft"), first.get("proxy"), first.get("lm_eval")
    if "swebench" in steps:
        hf_id = (res.sft or {}).get("hf_id") if want is not None else None
        if want is not None and res.sft is None:
            res.missing["swebench"] = "its SFT probe (sft) is missing"
            res.problems.append(f"{name} swebench: missing: its SFT probe (sft) is missing")
        elif want is not None and hf_id is None:
            res.missing["swebench"] = "the probe records no content id of its HF export (an older midtrain)"
            res.problems.append(f"{name} swebench: missing: {res.missing['swebench']}")
        else:
            res.swebench = _load_step(res, "swebench", hf_id, "this column's probe export")
        for key, unit in (res.swebench or {}).items():
            if isinstance(unit, dict) and (reason := ungraded(unit)):
                res.missing[f"swebench/{key}"] = reason
        res.problems += swebench_problems(res.swebench or {}, root / "swebench")
    if res.sft:
        run_dir = res.sft.get("run_dir")
        if run_dir:
            res.sft_curve = read_metrics(Path(run_dir) / METRICS)
        src = _run_dir_of(res.sft.get("from", ""))
        if src is not None:
            res.midtrain_curve = read_metrics(src / METRICS)
    return res
