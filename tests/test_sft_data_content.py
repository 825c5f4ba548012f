"""#53 case 3: the probe's data dir is keyed on the content of its inputs, not only their paths and settings.

A trace file edited at the same path and the probe rerun with --overwrite (as the protocol always does, over
one shared data dir) rebuilds the data from the new text; without --overwrite the old data is refused, naming
the dir. Real traces, tokenizer and pack."""

from __future__ import annotations

import json
import logging

import pytest
from sft_helpers import probe_cfg, sample_trace_docs, write_documents

from midtrain.formats.documents import document_files, read_jsonl
from midtrain.formats.outputs import OutputRefused
from midtrain.sft.data import prepare_data

MARK_OLD, MARK_NEW = "ZEBRA-ORIGINAL-TEXT", "QUOKKA-EDITED-TEXT"


def _with_mark(mark: str) -> list[dict]:
    docs = sample_trace_docs()
    for doc in docs:
        for m in doc["metadata"]["messages"]:
            if m.get("role") == "assistant" and isinstance(m.get("content"), str):
                m["content"] = f"{mark} {m['content']}"
                break
    return docs


def _train_text(data_dir) -> str:
    return "".join(json.dumps(d) for f in document_files(data_dir / "train_docs") for d in read_jsonl(f))


def test_edited_trace_at_the_same_path_is_rebuilt_never_reused(tmp_path, caplog):
    traces = write_documents(tmp_path / "traces", _with_mark(MARK_OLD))
    data = tmp_path / "sft_data"
    first = prepare_data(probe_cfg(traces), data)
    assert MARK_OLD in _train_text(data)
    again = prepare_data(probe_cfg(traces), data)  # unchanged: reused
    assert again["data_hash"] == first["data_hash"]
    write_documents(tmp_path / "traces", _with_mark(MARK_NEW))  # the same path, other text
    with pytest.raises(OutputRefused, match=f"data_dir: {data} holds probe data built with other settings"):
        prepare_data(probe_cfg(traces), data)
    caplog.clear()  # the reuse above may be recorded (another test set the root level to INFO)
    with caplog.at_level(logging.INFO):
        rebuilt = prepare_data(probe_cfg(traces), data, overwrite=True)
    assert "SFT data: reusing" not in caplog.text and rebuilt["data_hash"] != first["data_hash"]
    text = _train_text(data)
    assert MARK_NEW in text and MARK_OLD not in text
