"""Repositories (git working trees, bare mirrors or plain directories) -> one document per repository."""

from __future__ import annotations

from midtrain.sources.reader_pipeline import reader_pipeline
from midtrain.sources.repos import RepoReader

# The source stage: the reader, then the JSONL writer into raw/. A copy of this file given as SOURCE
# (`midtrain prep path/to/repos.py ...`) runs instead; its pipeline() may return any list of datatrove steps.
pipeline = reader_pipeline(RepoReader)
