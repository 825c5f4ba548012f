"""Eval scoring throughput: the same weights scoring the same packed validation sequences two ways, same run.

- megatron: the midtrain checkpoint, one forward per packed sequence (THD, document-masked attention);
- hf: its Hugging Face export (train.hf_export.export_hf), one forward per document piece (what `eval proxy`
  does for an HF directory).

Both must give the same held-out loss (printed: |delta|); the figures are tokens/s and their ratio (measured
interleaved, sequence by sequence), and the retrieval probe's cost per sample at each context length with
logits for the answer positions only (what the probe does) against logits for every position. A tiny Qwen3-shaped model
(Qwen vocabulary) on
real code: stdlib modules packed at --seq-length with `midtrain pack`'s pipeline.

    .venv/bin/python bench/bench_eval.py [--seq-length 1024] [--sequences 6] [--json out.json]
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def code_prep(out: Path) -> Path:
    import argparse as a
    import ast
    import dataclasses
    import email.message
    import functools
    import inspect as i
    import pathlib
    import textwrap

    from midtrain.formats.documents import write_jsonl_gz

    (out / "documents").mkdir(parents=True)
    rows = []
    for m in (a, ast, dataclasses, email.message, functools, i, pathlib, textwrap):
        name = m.__name__.replace(".", "/")
        text = f"<|repo_name|>cpython\n<|file_sep|>Lib/{name}.py\n{inspect.getsource(m)}"
        rows.append({"text": text, "id": f"repo:{name}", "metadata": {"source": "repo"}})
    write_jsonl_gz(out / "documents" / "00000.jsonl.gz", rows)
    return out


def main(argv: list[str] | None = None) -> int:
    from figures import bench_parser

    ap = bench_parser(__doc__)
    ap.add_argument("--seq-length", type=int, default=1024)
    ap.add_argument("--sequences", type=int, default=6, help="validation sequences scored each way")
    args = ap.parse_args(argv)
    if args.smoke:
        args.seq_length, args.sequences = 256, 2
    lengths = (256,) if args.smoke else (256, 512, 1024, 2048)
    logging.basicConfig(level=logging.WARNING)

    from midtrain.eval.config import RetrievalConfig
    from midtrain.eval.retrieval import Haystack, build_samples, read_documents, score_sample
    from midtrain.eval.scoring import HFScorer, MidtrainScorer
    from midtrain.formats.tokenizer import load_tokenizer
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack
    from midtrain.train.config import TrainConfig
    from midtrain.train.hf_export import export_hf
    from midtrain.train.initial_checkpoint import save_initial_checkpoint

    S = args.seq_length
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prep = code_prep(tmp / "prep")
        pack(PackConfig(seq_length=S, valid_fraction=0.5, seed=1, tokenize_tasks=1), [prep], tmp / "shards")
        cfg = TrainConfig(name="bench_eval", seed=1)
        cfg.precision.dtype, cfg.precision.transformer_impl = "fp32", "local"
        m = cfg.model
        m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups = 2, 64, 192, 4, 2
        m.max_position_embeddings = max(S, 2048)
        cfg.data.seq_length = S
        save_initial_checkpoint(cfg.validate(), tmp / "run")
        export_hf(tmp / "run", tmp / "hf")

        # Interleaved, same sequence back to back: a fair ratio on a machine whose load changes.
        from midtrain.formats.shard_reader import PackedDataset

        ds = PackedDataset(tmp / "shards", "valid")
        scorers = {"megatron": MidtrainScorer(tmp / "run"), "hf": HFScorer(tmp / "hf")}
        secs = dict.fromkeys(scorers, 0.0)
        nll: dict[str, list[Any]] = {k: [] for k in scorers}  # per-token NLL tensors
        n = min(len(ds), args.sequences)
        for i in range(n):
            s = ds[i]
            order = list(scorers) if i % 2 == 0 else list(reversed(scorers))
            for k in order:
                t0 = time.perf_counter()
                out = scorers[k].token_nll(s["tokens"], s["labels"], s["position_ids"], s["cu_seqlens"])
                secs[k] += time.perf_counter() - t0
                nll[k].append(out[s["loss_mask"] > 0])
        import torch

        loss = {k: float(torch.cat(v).mean()) for k, v in nll.items()}
        tok = load_tokenizer(shared=True)  # the one pack loaded
        hay = Haystack(read_documents(prep, 200_000), tok)
        per_len, full_len = {}, {}
        scorer = scorers["megatron"]
        for L in lengths:
            samples, _ = build_samples(
                RetrievalConfig(lengths=[L], depths=[0.5], tasks=["function"], samples=3), tok, hay
            )
            t_pos = t_full = 0.0
            for smp in samples:  # answer positions only (what the probe does) vs every position's logits
                ids = torch.tensor(smp.ids)
                cu = torch.tensor([0, L], dtype=torch.int32)
                t0 = time.perf_counter()
                score_sample(scorer, smp)
                t_pos += time.perf_counter() - t0
                t0 = time.perf_counter()
                scorer.logits(ids, torch.arange(L), cu)
                t_full += time.perf_counter() - t0
            per_len[str(L)] = t_pos / len(samples)
            full_len[str(L)] = t_full / len(samples)

    fig = {
        "heldout_tokens_per_s_megatron_packed": round(n * S / secs["megatron"]),
        "heldout_tokens_per_s_hf_per_document": round(n * S / secs["hf"]),
        "ratio_megatron_over_hf": round(secs["hf"] / secs["megatron"], 2),
        "heldout_loss_megatron": round(loss["megatron"], 6),
        "heldout_loss_hf": round(loss["hf"], 6),
        "heldout_loss_abs_delta": float(f"{abs(loss['megatron'] - loss['hf']):.2e}"),
        "retrieval_s_per_sample_answer_logits": {k: round(v, 3) for k, v in per_len.items()},
        "retrieval_s_per_sample_full_logits": {k: round(v, 3) for k, v in full_len.items()},
        f"retrieval_speedup_at_{lengths[-1]}": round(full_len[str(lengths[-1])] / per_len[str(lengths[-1])], 1),
        "seq_length": S,
        "sequences": n,
    }
    print(f"{'figure':<42} value")
    for k, v in fig.items():
        print(f"{k:<42} {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
