"""Eval scoring throughput: the same weights scoring the same packed validation sequences two ways, same run.

- megatron: the midtrain checkpoint, one forward per packed sequence (THD, document-masked attention);
- hf: its Hugging Face export (the HF team's export_hf), one forward per document piece (what `eval proxy`
  does for an HF directory).

Both must give the same held-out loss (printed: |delta|); the figures are tokens/s and their ratio, and the
retrieval probe's cost per sample at each context length. A tiny Qwen3-shaped model (Qwen vocabulary) on
real code: stdlib modules packed at --seq-length with the pack team's pipeline.

    .venv/bin/python bench/bench_eval.py [--seq-length 1024] [--sequences 6] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import inspect
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def code_prep(out: Path) -> Path:
    import argparse as a, ast, dataclasses, email.message, functools, inspect as i, pathlib, textwrap  # noqa: E401

    (out / "documents").mkdir(parents=True)
    with gzip.open(out / "documents" / "00000.jsonl.gz", "wt") as fh:
        for m in (a, ast, dataclasses, email.message, functools, i, pathlib, textwrap):
            name = m.__name__.replace(".", "/")
            fh.write(json.dumps({"text": f"<|repo_name|>cpython\n<|file_sep|>Lib/{name}.py\n{inspect.getsource(m)}",
                                 "id": f"repo:{name}", "metadata": {"source": "repo"}}) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-length", type=int, default=1024)
    ap.add_argument("--sequences", type=int, default=6, help="validation sequences scored each way")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from midtrain.eval.config import RetrievalConfig
    from midtrain.eval.demo import save_initial_checkpoint
    from midtrain.eval.heldout import heldout_loss
    from midtrain.eval.retrieval import Haystack, build_samples, read_documents, score_sample
    from midtrain.eval.scoring import HFScorer, MidtrainScorer
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack
    from midtrain.pack.tokenizer import load_tokenizer
    from midtrain.train.config import TrainConfig
    from midtrain.train.hf_export import export_hf

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

        rows = {}
        for name, scorer in (("megatron", MidtrainScorer(tmp / "run")), ("hf", HFScorer(tmp / "hf"))):
            heldout_loss(scorer, tmp / "shards", "valid", 1)  # warm-up
            t0 = time.perf_counter()
            h = heldout_loss(scorer, tmp / "shards", "valid", args.sequences)
            dt = time.perf_counter() - t0
            rows[name] = {"tokens_per_s": h["sequences"] * S / dt, "loss": h["all"]["loss"], "sequences": h["sequences"]}
        tok = load_tokenizer()
        hay = Haystack(read_documents(prep, 200_000), tok)
        per_len = {}
        scorer = MidtrainScorer(tmp / "run")
        for n in (256, 512, 1024, 2048):
            samples, _ = build_samples(RetrievalConfig(lengths=[n], depths=[0.5], tasks=["function"], samples=3),
                                       tok, hay)
            t0 = time.perf_counter()
            for s in samples:
                score_sample(scorer, s)
            per_len[str(n)] = (time.perf_counter() - t0) / len(samples)

    fig = {
        "heldout_tokens_per_s_megatron_packed": round(rows["megatron"]["tokens_per_s"]),
        "heldout_tokens_per_s_hf_per_document": round(rows["hf"]["tokens_per_s"]),
        "ratio_megatron_over_hf": round(rows["megatron"]["tokens_per_s"] / rows["hf"]["tokens_per_s"], 2),
        "heldout_loss_megatron": round(rows["megatron"]["loss"], 6), "heldout_loss_hf": round(rows["hf"]["loss"], 6),
        "heldout_loss_abs_delta": float(f"{abs(rows['megatron']['loss'] - rows['hf']['loss']):.2e}"),
        "retrieval_seconds_per_sample": {k: round(v, 3) for k, v in per_len.items()},
        "seq_length": S, "sequences": rows["megatron"]["sequences"],
    }
    print(f"{'figure':<42} value")
    for k, v in fig.items():
        print(f"{k:<42} {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
