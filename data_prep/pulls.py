"""Pull-request records (JSONL / Parquet / HF dataset, GitHub-API-like schema, SWE-bench-style task rows) or git
repositories (their merged PRs) -> one document each; with ``pulls.repos=DIR`` (or a git input) joined with the
repository: the files read at the base commit, then each commit with its reviews (midtrain/sources/pulls.py)."""

from __future__ import annotations

from midtrain.sources.pulls import PullReader
from midtrain.sources.reader_pipeline import reader_pipeline

# The source stage: the reader, then the JSONL writer into raw/. A copy of this file given as SOURCE
# (`midtrain prep path/to/pulls.py ...`) runs instead; its pipeline() may return any list of datatrove steps.
pipeline = reader_pipeline(PullReader)
