"""Curation as datatrove stages run after a source's reader stage (interface used by `midtrain prep`).

`midtrain prep` runs the source stage (reader -> documents into RAW_DIR as JSONL), then each stage returned
by :func:`curation_stages` in order with the chosen executor (local or Slurm), then merges the stats.
PLACEHOLDER until the curation capability lands: a single pass-through stage (nothing dropped).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter

from midtrain.config import Config


@dataclass
class CurationConfig(Config):
    """Which curation steps run (all on by default) and their thresholds."""


@dataclass
class CurationStage:
    name: str
    pipeline: list[PipelineStep]
    tasks: int | None = None  # None: as many tasks as the prep run; 1: a stage that must see everything
    extra: dict = field(default_factory=dict)


def curation_stages(cfg: CurationConfig, source: str, raw_dir: str, out_dir: str, work_dir: str) -> list[CurationStage]:
    """Stages reading RAW_DIR (JSONL documents) and writing the curated documents to OUT_DIR (JSONL.gz).

    work_dir is private scratch space (signatures, buckets, exclusions under work_dir/excluded/<step>).
    """
    return [CurationStage("passthrough", [JsonlReader(raw_dir), JsonlWriter(out_dir)])]
