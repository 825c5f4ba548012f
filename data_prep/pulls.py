"""Pull-request records (JSONL / Parquet / HF dataset, GitHub-API-like schema, SWE-bench-style task rows) or git
repositories (their merged PRs) -> one document each; with ``pulls.repos=DIR`` (or a git input) joined with the
repository: the files read at the base commit, then each commit with its reviews (midtrain/sources/pulls.py)."""

from __future__ import annotations

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers import JsonlWriter

from midtrain.sources.pulls import PullReader, PullsConfig


def pipeline(inputs: list[str], cfg: PullsConfig, raw_dir: str, report_dir: str,
             exclusion_dir: str | None = None) -> list[PipelineStep]:
    return [
        PullReader(inputs, cfg, report_dir=report_dir, exclusion_dir=exclusion_dir),
        JsonlWriter(raw_dir, output_filename="${rank}.jsonl"),  # gzip: ${rank}.jsonl.gz
    ]
