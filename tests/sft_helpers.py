"""Shared helpers for the SFT / eval tests (tests/test_sft_*.py, tests/test_eval_*.py): real inputs only."""

from __future__ import annotations

import gzip
import inspect
import json
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[1] / "data_prep" / "samples"


def write_documents(prep_dir: Path, docs: list[dict]) -> Path:
    """DIR/documents/00000.jsonl.gz in the prep output layout (datatrove JsonlWriter's fields)."""
    out = prep_dir / "documents"
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(out / "00000.jsonl.gz", "wt", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps(d) + "\n")
    return prep_dir


def sample_trace_docs() -> list[dict]:
    """The shipped sample trajectories, parsed by the trace reader (midtrain.sources.traces), as documents keeping messages."""
    from midtrain.sources.traces import load_trajectories

    docs = []
    for path in sorted((SAMPLES / "traces").iterdir()):
        for i, traj in enumerate(load_trajectories(path)):
            doc_id = f"trace:{path.name}:{i}"
            docs.append({"text": "(plain rendering not used)", "id": doc_id,
                         "metadata": {"source": "trace", "id": doc_id, "render_format": "plain",
                                      "messages": traj.messages, "tools": traj.tools, "loss_spans": [[0, 1]]}})
    return docs


def code_docs(n: int = 6) -> list[dict]:
    """Real Python source (stdlib modules) as packed-repository documents (Qwen2.5-Coder layout)."""
    import argparse, dataclasses, functools, json as jsonmod, pathlib, textwrap  # noqa: E401

    mods = [argparse, dataclasses, functools, jsonmod.decoder, pathlib, textwrap][:n]
    docs = []
    for m in mods:
        src = inspect.getsource(m)
        name = m.__name__.replace(".", "/")
        docs.append({"text": f"<|repo_name|>cpython\n<|file_sep|>Lib/{name}.py\n{src}", "id": f"repo:{name}",
                     "metadata": {"source": "repo", "repo": "python/cpython", "license": "PSF-2.0", "id": f"repo:{name}"}})
    return docs
