"""Shared helpers for the SFT / eval tests (tests/test_sft_*.py, tests/test_eval_*.py): real inputs only."""

from __future__ import annotations

import inspect
from pathlib import Path

from midtrain.formats.documents import write_jsonl_gz

SAMPLES = Path(__file__).resolve().parents[1] / "data_prep" / "samples"


def write_documents(prep_dir: Path, docs: list[dict]) -> Path:
    """DIR/documents/00000.jsonl.gz in the prep output layout (datatrove JsonlWriter's fields)."""
    out = prep_dir / "documents"
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl_gz(out / "00000.jsonl.gz", docs)
    return prep_dir


def sample_trace_docs() -> list[dict]:
    """The shipped sample trajectories, parsed by the trace reader (midtrain.sources.traces), as documents keeping messages."""
    from midtrain.sources.traces import load_trajectories

    docs = []
    for path in sorted((SAMPLES / "traces").iterdir()):
        for i, traj in enumerate(load_trajectories(path)):
            doc_id = f"trace:{traj.instance_id}:{path.name}:{i}"  # the reader's trace:{instance}:{where}
            docs.append(
                {
                    "text": "(plain rendering not used)",
                    "id": doc_id,
                    "metadata": {
                        "source": "trace",
                        "id": doc_id,
                        "render_format": "plain",
                        "instance_id": traj.instance_id,
                        "repo": traj.repo or "acme/minicalc",
                        "messages": traj.messages,
                        "tools": traj.tools,
                        "loss_spans": [[0, 1]],
                    },
                }
            )
    return docs


def code_docs(n: int = 6) -> list[dict]:
    """Real Python source (stdlib modules) as packed-repository documents (Qwen2.5-Coder layout)."""
    import argparse
    import dataclasses
    import functools
    import json as jsonmod
    import pathlib
    import textwrap

    mods = [argparse, dataclasses, functools, jsonmod.decoder, pathlib, textwrap][:n]
    docs = []
    for m in mods:
        src = inspect.getsource(m)
        name = m.__name__.replace(".", "/")
        docs.append(
            {
                "text": f"<|repo_name|>cpython\n<|file_sep|>Lib/{name}.py\n{src}",
                "id": f"repo:{name}",
                "metadata": {"source": "repo", "repo": "python/cpython", "license": "PSF-2.0", "id": f"repo:{name}"},
            }
        )
    return docs


def tiny_checkpoint(run_dir: Path, seed: int = 11, shards: str = "unused") -> Path:
    """A step-0 checkpoint of a 2-layer model (Qwen's vocab: the probe uses the real tokenizer); fast on CPU."""
    from midtrain.train.config import TrainConfig
    from midtrain.train.initial_checkpoint import save_initial_checkpoint

    cfg = TrainConfig(name="tiny_probe_start", run_dir=str(run_dir), seed=seed)
    cfg.precision.dtype = "fp32"
    cfg.precision.transformer_impl = "local"
    m = cfg.model
    m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups = 2, 32, 64, 4, 2
    m.max_position_embeddings = 1024
    cfg.data.path, cfg.data.seq_length = str(shards), 512
    cfg.log.tensorboard = False
    save_initial_checkpoint(cfg.validate(), run_dir)
    return run_dir


def probe_cfg(traces: Path, *overrides: str):
    """The demo probe recipe on TRACES, two steps at 512 tokens, no HF export (seconds on CPU)."""
    from recipes import get_recipe

    return (
        get_recipe("sft_probe_demo")
        .build(
            [
                f"traces=[{traces}]",
                "train.optim.train_steps=2",
                "train.optim.warmup_steps=1",
                "train.checkpoint.save_interval=2",
                "train.data.seq_length=512",
                "export_hf=false",
                *overrides,
            ]
        )
        .validate()
    )
