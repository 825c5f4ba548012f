"""Agent trajectories (SWE-agent, mini-swe-agent, OpenAI-style) -> rendered documents with loss_spans."""

from __future__ import annotations

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers import JsonlWriter

from midtrain.sources.traces import TraceReader, TracesConfig


def pipeline(inputs: list[str], cfg: TracesConfig, raw_dir: str, report_dir: str,
             exclusion_dir: str | None = None) -> list[PipelineStep]:
    return [
        TraceReader(inputs, cfg, report_dir=report_dir, exclusion_dir=exclusion_dir),
        JsonlWriter(raw_dir, output_filename="${rank}.jsonl"),  # gzip: ${rank}.jsonl.gz
    ]
