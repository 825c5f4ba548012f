"""Grading a SWE-bench unit and reading its grader's report: the `swebench` harness, Scale's Pro grader (a
checkout named by ``$SWEBENCH_PRO_DIR``: the ``swebench`` package has no specs for Pro's repositories) and
Pier's trials (DeepSWE)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from midtrain.eval.deepswe import JOB, parse_trials
from midtrain.eval.swebench_agents import deepswe_unit
from midtrain.eval.swebench_instances import PRO_IMAGE_REPO
from midtrain.eval.swebench_scripts import INSTANCES, PY, STEP, sh

if TYPE_CHECKING:
    from midtrain.eval.benchmarks import Benchmark
    from midtrain.eval.config import SweBenchConfig

log = logging.getLogger(__name__)

PRO_RAW_SAMPLES = "helper_code/sweap_eval_full_v2.jsonl"  # the grader's instance table, in Scale's checkout
PRO_OUTPUT = "_output.json"  # the grader's per-instance test report, GRADING/<id>/<prefix>_output.json (prefix "")


def parse_harness_report(path: str | Path) -> dict[str, Any]:
    """The `swebench` harness's final run report -> counts and the resolved rate over all instances run."""
    rep = json.loads(Path(path).read_text())
    missing = [k for k in ("total_instances", "resolved_instances") if k not in rep]
    if missing:
        raise ValueError(f"{path}: not a swebench run report (missing {missing})")
    total = int(rep["total_instances"])
    resolved = int(rep["resolved_instances"])
    errors = int(rep.get("error_instances", 0))
    graded = total - errors  # an error instance (no container, a harness crash) was never graded
    return {
        "resolved": resolved,
        "total": total,
        "rate": resolved / total if graded > 0 else None,  # none run, or none graded: unknown, never 0
        "submitted": int(rep.get("submitted_instances", 0)),
        "completed": int(rep.get("completed_instances", 0)),
        "empty_patch": int(rep.get("empty_patch_instances", 0)),
        "errors": errors,
        "error_ids": sorted(rep.get("error_ids") or []),
        "report": str(path),
    }


def parse_pro_results(
    path: str | Path, predictions: str | Path | None = None, instances: list[str] | None = None
) -> dict[str, Any]:
    """Scale's Pro grader output ({instance_id: passed}) -> counts.

    The grader writes `false` both for an instance whose tests failed and for one it could not run (no image,
    no Docker, a Modal auth error): only an instance with its test report (GRADING/<id>/_output.json) was
    graded. One without it, or without any entry, is an error (``error_ids``), never a failed instance.
    """
    path = Path(path)
    res = json.loads(path.read_text())
    if not isinstance(res, dict) or not all(isinstance(v, bool) for v in res.values()):
        raise ValueError(f"{path}: not a SWE-bench Pro eval_results.json ({{instance_id: bool}})")
    ids = set(res)
    if predictions is not None and Path(predictions).exists():
        ids |= {json.loads(line)["instance_id"] for line in Path(predictions).read_text().splitlines() if line.strip()}
    ids |= set(instances or ())  # the denominator: every instance asked for
    graded = {i for i in ids if i in res and (path.parent / i / PRO_OUTPUT).is_file()}
    resolved = sum(bool(res[i]) for i in graded)
    errors = sorted(ids - graded)
    if errors:
        log.error(
            "swebench pro: the grader could not grade %d of %d instances (no %s), e.g. %s; see "
            "GRADING/<id>/_stdout.log and the grader's log",
            len(errors),
            len(ids),
            PRO_OUTPUT,
            errors[:3],
        )
    # nothing graded (no Docker, no images): unknown, never a measured 0
    return {
        "resolved": resolved,
        "total": len(ids),
        "rate": resolved / len(ids) if graded else None,
        "submitted": len(ids),
        "completed": len(graded),
        "failed": len(graded) - resolved,
        "errors": len(errors),
        "error_ids": errors,
        "report": str(path),
    }


class Grader:
    """How a benchmark's units are graded (grade.sh) and its grader's report read into counts."""

    def unit_scripts(self, cfg: SweBenchConfig, bench: Benchmark, udir: Path) -> dict[str, Path] | None:
        """A grader that also runs the agent writes the unit's scripts itself; None: an agent harness runs it."""
        return None

    def grade_lines(self, cfg: SweBenchConfig, bench: Benchmark, bdir: Path, run_name: str) -> list[str]:
        """Grade BDIR/preds.jsonl (one line per instance asked for) into BDIR/grading; the report is named
        after ``run_name``."""
        raise NotImplementedError

    def report(self, bench: Benchmark, udir: Path, run_name: str, asked: list[str] | None) -> dict[str, Any] | None:
        """The counts in the unit's grading report; None when there is none."""
        raise NotImplementedError


class SwebenchHarness(Grader):
    """The `swebench` package's harness (SWE-bench Verified, Multilingual, the embedded CPU tasks)."""

    def grade_lines(self, cfg: SweBenchConfig, bench: Benchmark, bdir: Path, run_name: str) -> list[str]:
        grading = bdir / "grading"
        harness = sh(
            "-m",
            "swebench.harness.run_evaluation",
            "--dataset_name",
            bench.dataset,
            "--split",
            cfg.split,
            "--predictions_path",
            str(bdir / "preds.jsonl"),
            "--max_workers",
            str(cfg.grading_workers),
            "--run_id",
            f"midtrain-{run_name}",
            "--report_dir",
            str(grading),
        )
        # over the instances asked for (the harness's denominator), never an empty --instance_ids
        return [
            f"IDS=$(cat {sh(str(bdir / INSTANCES))})",
            f'[ -n "$IDS" ] || {{ echo "no instances listed in {bdir / INSTANCES}" >&2; exit 3; }}',
            f"mkdir -p {sh(str(grading))} && cd {sh(str(grading))}",  # the harness logs under cwd
            f"{PY} {harness} --instance_ids $IDS",
        ]

    def report(self, bench: Benchmark, udir: Path, run_name: str, asked: list[str] | None) -> dict[str, Any] | None:
        grading = udir / "grading"
        reports = sorted(grading.glob(f"*.midtrain-{run_name}.json")) if grading.is_dir() else []
        return parse_harness_report(reports[-1]) if reports else None


class ProGrader(Grader):
    """Scale's SWE-bench Pro grader (``swe_bench_pro_eval.py`` in a checkout named by ``$SWEBENCH_PRO_DIR``)."""

    def grade_lines(self, cfg: SweBenchConfig, bench: Benchmark, bdir: Path, run_name: str) -> list[str]:
        grading = bdir / "grading"
        # Scale's grader reads dockerfiles/ and imports helper_code/ relative to its checkout: it runs from there.
        # Without --use_local_docker it grades on Modal, and an instance it cannot run is written as `false`.
        return [
            ': "${SWEBENCH_PRO_DIR:?set SWEBENCH_PRO_DIR to a checkout of scaleapi/SWE-bench_Pro-os}"',
            f"{STEP} pro-patches {sh(str(bdir / 'preds.jsonl'), str(bdir / 'patches.json'))}",
            f"mkdir -p {sh(str(grading))}",
            'cd "$SWEBENCH_PRO_DIR"',
            f"{PY} swe_bench_pro_eval.py --raw_sample_path={PRO_RAW_SAMPLES} "
            f"--patch_path={sh(str(bdir / 'patches.json'))} --output_dir={sh(str(grading))} "
            f"--scripts_dir=run_scripts --num_workers={cfg.grading_workers} "
            f"--dockerhub_username={PRO_IMAGE_REPO.split('/')[0]} --use_local_docker",
        ]

    def report(self, bench: Benchmark, udir: Path, run_name: str, asked: list[str] | None) -> dict[str, Any] | None:
        results = udir / "grading" / "eval_results.json"
        return parse_pro_results(results, udir / "preds.jsonl", asked) if results.exists() else None


class PierGrader(Grader):
    """Pier (DeepSWE's Harbor tasks): it runs mini-swe-agent in each task's sandbox and grades every trial."""

    def unit_scripts(self, cfg: SweBenchConfig, bench: Benchmark, udir: Path) -> dict[str, Path] | None:
        return deepswe_unit(cfg, bench, udir)

    def grade_lines(self, cfg: SweBenchConfig, bench: Benchmark, bdir: Path, run_name: str) -> list[str]:
        raise AssertionError("Pier grades in its own unit's scripts (unit_scripts)")

    def report(self, bench: Benchmark, udir: Path, run_name: str, asked: list[str] | None) -> dict[str, Any] | None:
        return parse_trials(udir / "jobs" / JOB, asked) if (udir / "jobs" / JOB).is_dir() else None
