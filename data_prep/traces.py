"""Agent trajectories (SWE-agent, mini-swe-agent, OpenAI-style) -> rendered documents with loss_spans."""

from __future__ import annotations

from midtrain.sources.reader_pipeline import reader_pipeline
from midtrain.sources.traces import TraceReader

# The source stage: the reader, then the JSONL writer into raw/. A copy of this file given as SOURCE
# (`midtrain prep path/to/traces.py ...`) runs instead; its pipeline() may return any list of datatrove steps.
pipeline = reader_pipeline(TraceReader)
