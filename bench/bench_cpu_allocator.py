"""CPU training step with glibc's default allocator against CPU mode's ``keep_freed_memory``, same steps.

CPU mode (midtrain/train/cpu_mode.py) tells glibc's malloc to serve large blocks from its heap and keep
them when freed, so a step's gigabyte-sized logits, softmax and gradient tensors reuse last step's pages
instead of faulting in fresh zeroed ones. This runs the same demo_tiny-shaped training (2 layers, hidden 64,
the 151,936-id vocabulary whose output layer dominates a CPU step) twice, each in a fresh process: once
with glibc's defaults put back after CPU mode set its own, once as CPU mode leaves it. It reports each run's
median CPU time per step (user + system of the process: meaningful on a shared machine) and their ratio.

    .venv/bin/python bench/bench_cpu_allocator.py [--steps 8] [--seq-length 2048] [--json out/alloc.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
VOCAB = 151_936


def _child(allocator: str, shards: str, run_dir: str, steps: int, seq_length: int, vocab: int) -> list[float]:
    """One training in this process; CPU seconds of each step after the first (metrics.jsonl's process_cpu_s)."""
    from train_helpers import tiny_config

    from midtrain.train import cpu_mode
    from midtrain.train.trainer import train

    cfg = tiny_config(
        **{
            "data.path": shards,
            "run_dir": run_dir,
            "data.seq_length": seq_length,
            "model.max_position_embeddings": seq_length,
            "model.vocab_size": vocab,
            "model.num_layers": 2,
            "model.ffn_hidden_size": 192,
            "optim.train_steps": steps,
            "optim.global_batch_size": 1,
            "checkpoint.save_interval": 10_000,
            "checkpoint.save_final": False,
            "log.interval": 1,
        }
    )
    cpu_mode.enable()  # idempotent: train() below finds it on, so the allocator set here stays
    if allocator == "glibc_default":
        assert cpu_mode.keep_freed_memory(False), "not glibc: nothing to compare"
    train(cfg)
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    cpu = [r["process_cpu_s"] for r in rows if "process_cpu_s" in r]
    return [b - a for a, b in zip(cpu, cpu[1:])]


def main(argv: list[str] | None = None) -> int:
    from figures import bench_parser

    ap = bench_parser(__doc__)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seq-length", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=VOCAB, help="output layer size (default: Qwen's)")
    ap.add_argument("--child", nargs=3, metavar=("ALLOCATOR", "SHARDS", "RUN_DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.smoke:
        args.steps, args.seq_length, args.vocab = 2, 128, 4096  # the two processes' start-up is the rest
    logging.basicConfig(level=logging.WARNING)
    if args.child:
        allocator, shards_dir, run_dir = args.child
        print(json.dumps(_child(allocator, shards_dir, run_dir, args.steps, args.seq_length, args.vocab)))
        return 0
    from figures import emit
    from train_helpers import write_shards

    figures: dict[str, object] = {"seq_length": args.seq_length, "steps": args.steps, "vocab": args.vocab}
    step_cpu: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        shards = write_shards(
            Path(tmp) / "shards", sequences=args.steps + 4, seq_length=args.seq_length, vocab=args.vocab
        )
        for allocator in ("glibc_default", "keep_freed_memory"):
            proc = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--steps",
                    str(args.steps),
                    "--seq-length",
                    str(args.seq_length),
                    "--vocab",
                    str(args.vocab),
                    "--child",
                    allocator,
                    str(shards),
                    str(Path(tmp) / allocator),
                ],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
            steps = json.loads(proc.stdout.strip().splitlines()[-1])
            step_cpu[allocator] = round(statistics.median(steps), 3)
            figures[f"{allocator}_step_cpu_s"] = step_cpu[allocator]
    figures["keep_freed_vs_default_cpu_ratio"] = round(step_cpu["keep_freed_memory"] / step_cpu["glibc_default"], 3)
    emit(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
