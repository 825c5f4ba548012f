"""CI / build / test logs (text files or JSONL records) -> cleaned documents."""

from __future__ import annotations

from midtrain.sources.buildlogs import BuildLogReader
from midtrain.sources.reader_pipeline import reader_pipeline

# The source stage: the reader, then the JSONL writer into raw/. A copy of this file given as SOURCE
# (`midtrain prep path/to/buildlogs.py ...`) runs instead; its pipeline() may return any list of datatrove steps.
pipeline = reader_pipeline(BuildLogReader)
