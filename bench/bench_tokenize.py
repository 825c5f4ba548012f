"""Tokenize throughput per core: midtrain's TokenizeStep vs datatrove's bare DocumentTokenizer, same input,
same tokenizer (Qwen3, built offline), same run; the target is <= 10% overhead.

Input: real Python source from the installed packages (one document per file, a packed-repository-like
share with file headers), optionally with a share of chat traces carrying loss_spans (offsets path).
Runs alternate (bare, ours, bare, ours, ...) and the best of each is kept. Times are this process's CPU
time (one tokenizer thread), so other load on the machine does not skew the ratio.

    .venv/bin/python bench/bench_tokenize.py [--mb 3] [--json out.json]
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one core for both (HF tokenizers' batch encode uses rayon)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import json
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any


def load_documents(mb: float, trace_share: float):
    import transformers
    from datatrove.data import Document

    root = Path(transformers.__file__).parent
    docs, size = [], 0
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(errors="replace")
        if not text.strip():
            continue
        docs.append(
            Document(
                text=f"<|file_sep|>{path.relative_to(root)}\n{text}",
                id=str(path),
                metadata={"source": "repo", "repo": "huggingface/transformers", "license": "Apache-2.0"},
            )
        )
        size += len(text.encode())
        if size >= mb * 1e6:
            break
    n_traces = int(len(docs) * trace_share)
    for i in range(n_traces):  # chat traces of realistic shape, loss on the assistant turns
        body = docs[i].text[:3000]
        user = f"<|im_start|>user\nExplain this file:\n{body[:1000]}<|im_end|>\n"
        asst = f"<|im_start|>assistant\n{body[1000:3000]}<|im_end|>\n"
        docs[i] = Document(
            text=user + asst,
            id=f"trace-{i}",
            metadata={"source": "trace", "loss_spans": [[len(user), len(user) + len(asst)]]},
        )
    return docs, sum(len(d.text.encode()) for d in docs)


def consume(result) -> None:
    if result is not None:
        deque(result, maxlen=0)


def run_bare(docs, tok_file: str, eos: str, tmp: str) -> float:
    from datatrove.pipeline.tokens import DocumentTokenizer

    step = DocumentTokenizer(
        output_folder=tmp,
        tokenizer_name_or_path=tok_file,
        eos_token=eos,
        shuffle_documents=False,
        save_final_metadata=False,
    )
    _ = step.tokenizer  # load the tokenizer (seconds for 151K ids) outside the timing, for both
    t0 = time.process_time()
    consume(step.run(iter(docs), rank=0, world_size=1))
    return time.process_time() - t0


def run_ours(docs, tok_file: str, eos: str, tmp: str) -> float:
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.tokenize import TokenizeStep

    step = TokenizeStep(tmp, tok_file, eos, PackConfig().boundaries)
    _ = step.tokenizer
    t0 = time.process_time()
    consume(step.run(iter(docs), rank=0, world_size=1))
    return time.process_time() - t0


def main() -> int:
    from figures import bench_parser

    ap = bench_parser(__doc__)
    ap.add_argument("--mb", type=float, default=3.0, help="input size in MB of source text (default 3)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.smoke:
        args.mb, args.repeats = 0.05, 1
    import logging
    import warnings

    warnings.filterwarnings("ignore")  # megatron-core's TE/Apex fallbacks notices

    from datatrove.utils.logging import logger

    logger.remove()  # quiet datatrove's per-step logging
    logging.disable(logging.WARNING)
    from midtrain.formats.tokenizer import EOS_TOKEN, default_tokenizer_path

    tok_file = str(default_tokenizer_path())
    import megatron.core.datasets.indexed_dataset  # noqa: F401 - import cost outside the timing

    figures: dict[str, Any] = {"threads": int(os.environ["RAYON_NUM_THREADS"])}
    rows = []
    for label, share in (("code only", 0.0), ("10% traces with loss_spans", 0.1)):
        docs, nbytes = load_documents(args.mb, share)
        best = {"bare": float("inf"), "ours": float("inf")}
        for _ in range(args.repeats):
            for name, fn in (("bare", run_bare), ("ours", run_ours)):
                with tempfile.TemporaryDirectory() as tmp:
                    best[name] = min(best[name], fn(docs, tok_file, EOS_TOKEN, tmp))
        mbs = {k: nbytes / 1e6 / v for k, v in best.items()}
        overhead = best["ours"] / best["bare"] - 1
        rows.append((label, len(docs), nbytes, mbs["bare"], mbs["ours"], overhead))
        figures[label.replace(" ", "_").replace("%", "pct")] = {
            "documents": len(docs),
            "mb": round(nbytes / 1e6, 2),
            "bare_mb_per_s": round(mbs["bare"], 3),
            "ours_mb_per_s": round(mbs["ours"], 3),
            "overhead": round(overhead, 4),
        }
    print(f"{'input':<28} {'docs':>6} {'MB':>6} {'datatrove MB/s':>15} {'midtrain MB/s':>14} {'overhead':>9}")
    for label, n, nb, b, o, ov in rows:
        print(f"{label:<28} {n:>6} {nb / 1e6:>6.2f} {b:>15.3f} {o:>14.3f} {ov:>+9.1%}")
    print(f"target: overhead <= 10% on code -> {'met' if rows[0][5] <= 0.10 else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
