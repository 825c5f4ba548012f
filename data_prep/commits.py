"""Git histories -> documents of consecutive commits (message + diff), authors anonymised."""

from __future__ import annotations

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers import JsonlWriter

from midtrain.sources.commits import CommitReader, CommitsConfig


def pipeline(inputs: list[str], cfg: CommitsConfig, raw_dir: str, report_dir: str,
             exclusion_dir: str | None = None) -> list[PipelineStep]:
    return [
        CommitReader(inputs, cfg, report_dir=report_dir, exclusion_dir=exclusion_dir),
        JsonlWriter(raw_dir, output_filename="${rank}.jsonl"),  # gzip: ${rank}.jsonl.gz
    ]
