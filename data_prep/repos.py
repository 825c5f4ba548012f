"""Repositories (git working trees, bare mirrors or plain directories) -> one document per repository."""

from __future__ import annotations

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers import JsonlWriter

from midtrain.sources.repos import RepoReader, ReposConfig


def pipeline(inputs: list[str], cfg: ReposConfig, raw_dir: str, report_dir: str,
             exclusion_dir: str | None = None) -> list[PipelineStep]:
    return [
        RepoReader(inputs, cfg, report_dir=report_dir, exclusion_dir=exclusion_dir),
        JsonlWriter(raw_dir, output_filename="${rank}.jsonl"),  # gzip: ${rank}.jsonl.gz
    ]
