"""Git histories -> documents of consecutive commits (message + diff), authors anonymised."""

from __future__ import annotations

from midtrain.sources.commits import CommitReader
from midtrain.sources.reader_pipeline import reader_pipeline

# The source stage: the reader, then the JSONL writer into raw/. A copy of this file given as SOURCE
# (`midtrain prep path/to/commits.py ...`) runs instead; its pipeline() may return any list of datatrove steps.
pipeline = reader_pipeline(CommitReader)
