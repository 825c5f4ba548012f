"""CI / build / test logs (text files or JSONL records) -> cleaned documents."""

from __future__ import annotations

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers import JsonlWriter

from midtrain.sources.buildlogs import BuildLogReader, BuildLogsConfig


def pipeline(inputs: list[str], cfg: BuildLogsConfig, raw_dir: str, report_dir: str,
             exclusion_dir: str | None = None) -> list[PipelineStep]:
    return [
        BuildLogReader(inputs, cfg, report_dir=report_dir, exclusion_dir=exclusion_dir),
        JsonlWriter(raw_dir, output_filename="${rank}.jsonl"),  # gzip: ${rank}.jsonl.gz
    ]
