"""datatrove pipelines run by `midtrain prep SOURCE` (one module per source) and the demo's sample inputs.

Each module defines ``pipeline(inputs, cfg, raw_dir, report_dir) -> list[PipelineStep]``: the source stage
(reader -> raw JSONL). `midtrain prep` runs it, then the curation stages, then the stats stage.
"""
