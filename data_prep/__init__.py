"""datatrove pipelines run by `midtrain prep SOURCE` (one module per source) and the demo's sample inputs.

Each module defines ``pipeline(inputs, cfg, raw_dir, report_dir, exclusion_dir=None) -> list[PipelineStep]``: the
source stage (reader -> raw JSONL). `midtrain prep` runs it, then the curation stages, then the stats stage. A
pipeline file given as SOURCE (`midtrain prep mypipes/repos.py ...`) is imported and its pipeline() runs instead
of the built-in one; the file's name (repos) chooses the reader config that `repos.field=value` overrides set.
"""
