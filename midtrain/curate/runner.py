"""Run the curation stages locally (tests, bench, ad-hoc runs); `midtrain prep` uses its own executor loop.

:func:`run_local` runs each :class:`CurationStage` with datatrove's LocalPipelineExecutor, in order, and
returns the merged stats as plain counts: ``{stage: {step name: {stat: total}}}``.
"""

from __future__ import annotations

from pathlib import Path

from datatrove.executor import LocalPipelineExecutor
from datatrove.utils.stats import PipelineStats

from midtrain.curate.stages import CurationConfig, CurationStage, curation_stages


def stats_counts(stats: PipelineStats | None) -> dict[str, dict[str, float]]:
    """{step: {stat: total}} from datatrove's merged stats (timing left out)."""
    out: dict[str, dict[str, float]] = {}
    for st in (stats.stats if stats else []):
        counts = {}
        for key, metric in st.stats.items():
            counts[key] = metric.total if hasattr(metric, "total") else metric
        out[st.name] = counts
    return out


def run_stages(stages: list[CurationStage], logging_dir: str | Path, tasks: int = 1, workers: int = 1
               ) -> dict[str, dict[str, dict[str, float]]]:
    result = {}
    for stage in stages:
        n = stage.tasks or tasks
        ex = LocalPipelineExecutor(stage.pipeline, tasks=n, workers=min(workers, n),
                                   logging_dir=str(Path(logging_dir) / stage.name))
        result[stage.name] = stats_counts(ex.run())
    return result


def run_local(cfg: CurationConfig, source: str, raw_dir: str | Path, out_dir: str | Path, work_dir: str | Path,
              tasks: int = 1, workers: int = 1) -> dict[str, dict[str, dict[str, float]]]:
    stages = curation_stages(cfg, source, str(raw_dir), str(out_dir), str(work_dir), tasks)
    return run_stages(stages, Path(work_dir) / "logs", tasks, workers)


def step_counts(result: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Merge the stages: {"<step name>": {stat: total}} (handy in tests and reports)."""
    flat: dict[str, dict[str, float]] = {}
    for stage in result.values():
        for step, counts in stage.items():
            mine = flat.setdefault(step.split(": ", 1)[-1], {})
            for k, v in counts.items():
                mine[k] = mine.get(k, 0) + v
    return flat
