"""Proxy evals users already trust: an lm-evaluation-harness run on the checkpoint's Hugging Face export.

The checkpoint (a midtrain run or an HF directory) is exported to OUTPUT/hf when it is not HF already, then
``lm_eval.simple_evaluate`` runs the configured tasks with lm-eval's own HF model wrapper; OUTPUT/
lm_eval_results.json holds lm-eval's per-task metrics (value and stderr) and the versions and config.

Tasks are lm-eval's (e.g. humaneval, mbpp, and its RULER tasks for long context, which read their data from
the Hugging Face hub, i.e. the cluster's cache) plus ``midtrain_code_mc``: a small local multiple-choice code
completion task shipped in midtrain/eval/lm_eval_data/ (no network), whose task YAML is written at run time
under OUTPUT/tasks/ pointing at that file; it proves the wiring on the demo model on CPU.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from midtrain.eval.config import LmEvalConfig
from midtrain.eval.results import LM_EVAL_RESULT, scored_result
from midtrain.eval.scoring import is_hf_dir
from midtrain.formats.stamp import stamp
from midtrain.train.distributed import read_env
from midtrain.train.hf_export import export_hf

log = logging.getLogger(__name__)

LOCAL_DATA = Path(__file__).with_name("lm_eval_data")
LOCAL_TASKS: dict[str, dict[str, Any]] = {
    "midtrain_code_mc": {
        "task": "midtrain_code_mc",
        "dataset_path": "json",
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "{{context}}",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "{{gold}}",
        "target_delimiter": "",
        "metric_list": [
            {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
            {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
        ],
        "metadata": {"version": 1.0},
        "_data": "code_mc.jsonl",
    },
}


def write_local_tasks(task_dir: Path, tasks: list[str]) -> list[str]:
    """Task YAMLs of the shipped local tasks that ``tasks`` names, over the shipped JSONL (absolute path)."""
    task_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in tasks:
        if name not in LOCAL_TASKS:
            continue
        spec = dict(LOCAL_TASKS[name])
        data = LOCAL_DATA / spec.pop("_data")
        spec["dataset_kwargs"] = {"data_files": {"test": str(data)}}
        (task_dir / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        written.append(name)
    return written


def hf_checkpoint(checkpoint: str | Path, out: Path, tokenizer: str | None) -> Path:
    """The checkpoint itself when it is an HF directory, else its export under OUT/hf (reused when present)."""

    if is_hf_dir(checkpoint):
        return Path(checkpoint)
    dst = out / "hf"
    if is_hf_dir(dst):
        return dst

    return Path(export_hf(checkpoint, dst, tokenizer=tokenizer))


def summarize(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """lm-eval's ``results`` -> {task: {metric: value}} (filters joined to the metric name, stderr kept)."""
    out: dict[str, dict[str, float]] = {}
    for task, metrics in (results.get("results") or {}).items():
        row = {}
        for key, value in metrics.items():
            if key == "alias" or not isinstance(value, (int, float)):
                continue
            metric, _, filt = key.partition(",")
            row[metric if filt in ("", "none") else f"{metric}[{filt}]"] = float(value)
        out[task] = row
    return out


def run_lm_eval(checkpoint: str | Path, cfg: LmEvalConfig, output: str | Path) -> dict[str, Any]:
    """Run lm-eval on CHECKPOINT's HF export; writes OUTPUT/lm_eval_results.json and returns it."""
    cfg.validate()
    out, hold = Path(output), read_env().rank == 0
    want = stamp(checkpoint, cfg.to_dict())
    return scored_result("lm_eval", out / LM_EVAL_RESULT, want, lambda: _score(checkpoint, cfg, out), hold)


def _score(checkpoint: str | Path, cfg: LmEvalConfig, out: Path) -> dict[str, Any] | None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    hf = hf_checkpoint(checkpoint, out, cfg.tokenizer)
    include = [str(out / "tasks")] if write_local_tasks(out / "tasks", cfg.tasks) else []
    if cfg.include_path:
        include.append(cfg.include_path)
    model_args: dict[str, Any] = {"pretrained": str(hf), "dtype": cfg.dtype}
    if cfg.max_length:
        model_args["max_length"] = cfg.max_length
    raw = lm_eval.simple_evaluate(
        model="hf",
        model_args=model_args,
        tasks=list(cfg.tasks),
        num_fewshot=cfg.num_fewshot,
        batch_size=cfg.batch_size,
        device=cfg.device,
        limit=cfg.limit,
        log_samples=False,
        task_manager=TaskManager(include_path=include or None),
        confirm_run_unsafe_code=cfg.allow_code_execution,
        random_seed=cfg.seed,
        numpy_random_seed=cfg.seed,
        torch_random_seed=cfg.seed,
        fewshot_random_seed=cfg.seed,
        metadata={"max_seq_lengths": list(cfg.max_seq_lengths)} if cfg.max_seq_lengths else None,
    )
    if raw is None:  # non-zero ranks of a distributed run
        return None
    tasks = summarize(raw)
    for task, row in tasks.items():
        log.info("lm-eval %s: %s", task, ", ".join(f"{k}={v:.4f}" for k, v in row.items()))
    return {
        "hf": str(hf),
        "tasks": tasks,
        "n_samples": raw.get("n-samples"),
        "versions": raw.get("versions"),
        "lm_eval_version": getattr(lm_eval, "__version__", None),
    }
