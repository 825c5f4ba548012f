"""The pipeline() of a data_prep/<source>.py file whose source stage is one reader.

The pipeline files import this, and midtrain/sources/prep.py loads them by name: kept apart from prep.py so
that loading a pipeline file never imports the module that loads it (tests/test_layers.py follows the load).
"""

from __future__ import annotations

from typing import Any

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers import JsonlWriter

from midtrain.sources.common import ReaderConfig


def reader_pipeline(reader: type[PipelineStep]) -> Any:
    """The reader, then datatrove's JSONL writer into raw/ (gzip, one file a task). The five built-in pipeline
    files are this; a custom one can be any list of steps."""

    def pipeline(
        inputs: list[str], cfg: ReaderConfig, raw_dir: str, report_dir: str, exclusion_dir: str | None = None
    ) -> list[PipelineStep]:
        return [
            reader(inputs, cfg, report_dir=report_dir, exclusion_dir=exclusion_dir),
            JsonlWriter(raw_dir, output_filename="${rank}.jsonl"),
        ]  # gzip: ${rank}.jsonl.gz

    return pipeline
