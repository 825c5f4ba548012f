"""Where each protocol step leaves its numbers, and how the report reads them back.

One checkpoint's protocol directory holds ``sft/sft_result.json`` (the probe), ``proxy/proxy_results.json``
and ``swebench/swebench_results.json``; a probe or proxy run repeated with other seeds adds ``sft-s<SEED>/``
and ``proxy-s<SEED>/`` beside them (the report shows mean ± spread over them). Missing or unreadable files are
reported, never fatal: a report over partial results says what is missing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midtrain.formats.rundir import METRICS, PROXY_RESULT, SFT_RESULT, SWEBENCH_RESULT, read_metrics, run_dir_of
from midtrain.formats.stamp import reusable_result

log = logging.getLogger(__name__)

LM_EVAL_RESULT = "lm_eval_results.json"


def scored_result(path: Path, want: dict[str, Any], score: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
    """A scoring step's result file (the proxy's, lm-eval's): reused when its stamp equals WANT, else SCORE()'s
    fields after WANT's, with the seconds scoring took, written to PATH. SCORE returns None where this process
    writes nothing (lm-eval's non-zero ranks): {} then."""
    done = reusable_result(path, want)
    if done is not None:
        return done
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    fields = score()
    if fields is None:
        return {}
    result = {**want, **fields, "seconds": round(time.time() - t0, 1)}
    path.write_text(json.dumps(result, indent=2, default=str))
    return result


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


def _seed_runs(root: Path, step_dir: str, result: str, problems: list[str]) -> list[dict[str, Any] | None]:
    dirs = sorted(root.glob(f"{step_dir}-s*"), key=lambda p: (len(p.name), p.name))
    runs = [(d.name, _read_json(d / result, problems)) for d in dirs if d.is_dir()]
    return [_seeded(r, name) for name, r in runs]


def _seeded(run: dict[str, Any] | None, seed_dir: str) -> dict[str, Any] | None:
    """RUN with the directory of its seed (``sft``, ``sft-s4322``): what pairs it with another checkpoint's."""
    if isinstance(run, dict):
        run.setdefault("seed_dir", seed_dir)
    return run


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


def load_checkpoint_results(name: str, root: str | Path) -> CheckpointResults:
    root = Path(root)
    res = CheckpointResults(name=name, root=root)
    if not root.is_dir():
        res.problems.append(f"no protocol directory {root}")
        return res
    # An eval the protocol did not run leaves no directory: that is not a problem, a missing result file is.
    res.sft = _read_json(root / "sft" / SFT_RESULT, res.problems)
    if (root / "proxy").exists():
        res.proxy = _read_json(root / "proxy" / PROXY_RESULT, res.problems)
    if (root / "lm_eval").exists():
        res.lm_eval = _read_json(root / "lm_eval" / LM_EVAL_RESULT, res.problems)
    if (root / "swebench").exists():
        res.swebench = _read_json(root / "swebench" / SWEBENCH_RESULT, res.problems)
        res.problems += swebench_problems(res.swebench or {}, root / "swebench")
    res.sft_runs = [r for r in [_seeded(res.sft, "sft"), *_seed_runs(root, "sft", SFT_RESULT, res.problems)] if r]
    first_proxy = _seeded(res.proxy, "proxy")
    res.proxy_runs = [r for r in [first_proxy, *_seed_runs(root, "proxy", PROXY_RESULT, res.problems)] if r]
    if res.sft:
        run_dir = res.sft.get("run_dir")
        if run_dir:
            res.sft_curve = read_metrics(Path(run_dir) / METRICS)
        src = _run_dir_of(res.sft.get("from", ""))
        if src is not None:
            res.midtrain_curve = read_metrics(src / METRICS)
    return res
