"""Training-loop overhead per step: midtrain's train() against a bare megatron-core step, same model and batches.

Both sides build the same model (build_gpt_model, same seed) and run the same packed sequences from the
same shards. The bare step is the minimum megatron-core needs: get_forward_backward_func() over batches
already in memory, then optimizer.step(). The loop step is everything train() does per step: reading the
shards (reader + loader), THD batches, per-source loss, DP reductions, NaN guard, LR schedule, logging to
metrics.jsonl (measured between consecutive metrics records, so logging counts). Target: <= 5 %.
Both wall time and this process's CPU time are measured; CPU time is the headline figure because it stays
meaningful on a machine shared with other jobs (wall time there mostly measures the neighbours).

    .venv/bin/python bench/bench_step.py [--steps 30] [--seq-length 1024] [--json out/bench_step.json]
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))


def _config(shards: Path, run_dir: Path, steps: int, seq_length: int):
    from train_helpers import tiny_config

    return tiny_config(
        **{
            "data.path": str(shards),
            "run_dir": str(run_dir),
            "data.seq_length": seq_length,
            "model.max_position_embeddings": seq_length,
            "model.vocab_size": 4096,
            "model.num_layers": 4,
            "model.hidden_size": 128,
            "model.ffn_hidden_size": 384,
            "optim.train_steps": steps,
            "optim.warmup_steps": 2,
            "optim.global_batch_size": 2,
            "checkpoint.save_interval": 10_000,
            "checkpoint.save_final": False,
            "log.tensorboard": True,
            "log.interval": 10_000,
        }
    )


def loop_step_times(cfg) -> tuple[list[float], list[float]]:
    from midtrain.train import distributed
    from midtrain.train.trainer import train

    train(cfg)
    distributed.destroy()
    rows = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    wall = [r["time"] for r in rows]
    cpu = [r["process_cpu_s"] for r in rows]
    return [b - a for a, b in zip(wall, wall[1:])], [b - a for a, b in zip(cpu, cpu[1:])]


def bare_step_times(cfg, steps: int) -> tuple[list[float], list[float]]:
    """megatron-core alone: the same model/optimizer stack, batches pre-built in memory."""
    import torch
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from midtrain.formats.shard_reader import PackedDataset, PackedLoader
    from midtrain.train import distributed
    from midtrain.train.batch import to_batch
    from midtrain.train.model import build_gpt_model
    from midtrain.train.trainer import build_optimizer, wrap_model

    distributed.initialize(seed=cfg.seed)
    model = wrap_model(cfg, build_gpt_model(cfg))
    optimizer, _ = build_optimizer(cfg, model)
    model.config.finalize_model_grads_func = finalize_model_grads
    model.config.no_sync_func = model.no_sync
    loader = iter(PackedLoader(PackedDataset(cfg.data.path), seed=cfg.data.seed))
    n = cfg.optim.global_batch_size
    batches = [to_batch(next(loader)) for _ in range(steps * n)]

    def forward_step(it, m):
        b = next(it)
        out = m(b.tokens, b.position_ids, None, labels=b.labels, packed_seq_params=b.packed_seq_params)

        def loss(o):
            s = (o.float().reshape(-1) * b.loss_mask.reshape(-1)).sum()
            t = b.loss_mask.sum()
            return s, t.to(torch.int), {"loss": s.detach()}

        return out, loss

    fb = get_forward_backward_func()
    wall, cpu = [], []
    for step in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        fb(
            forward_step_func=forward_step,
            data_iterator=iter(batches[step * n : (step + 1) * n]),
            model=[model],
            num_microbatches=n,
            seq_length=cfg.data.seq_length,
            micro_batch_size=1,
            forward_only=False,
        )
        optimizer.step()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    distributed.destroy()
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    from figures import bench_parser

    ap = bench_parser(__doc__)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seq-length", type=int, default=1024)
    args = ap.parse_args(argv)
    if args.smoke:
        args.steps, args.seq_length = 5, 128
    logging.basicConfig(level=logging.WARNING)
    from figures import emit
    from train_helpers import write_shards

    skip = 3  # warm-up steps left out of every median
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        shards = write_shards(tmp / "shards", sequences=2 * args.steps + 4, seq_length=args.seq_length, vocab=4096)
        cfg = _config(shards, tmp / "run", args.steps, args.seq_length)
        bare_a = bare_step_times(cfg, args.steps)
        loop = loop_step_times(cfg)
        bare_b = bare_step_times(cfg, args.steps)
    figures: dict[str, object] = {"seq_length": args.seq_length, "steps": args.steps, "sequences_per_step": 2}
    for i, kind in enumerate(("cpu", "wall")):
        a, b, lp = bare_a[i][skip:], bare_b[i][skip:], loop[i][skip:]
        bare, loop_med = statistics.median(a + b), statistics.median(lp)
        figures[f"bare_step_ms_{kind}"] = round(1e3 * bare, 2)
        figures[f"loop_step_ms_{kind}"] = round(1e3 * loop_med, 2)
        figures[f"loop_overhead_pct_{kind}"] = round(100 * (loop_med / bare - 1.0), 2)
        # the two bare runs (before and after the loop) bound the measurement noise
        figures[f"bare_spread_pct_{kind}"] = round(100 * abs(statistics.median(a) / statistics.median(b) - 1), 2)
    figures["target_overhead_pct"] = 5.0
    emit(figures, args.json)
    print(
        f"loop overhead {figures['loop_overhead_pct_cpu']:+.1f}% CPU time, {figures['loop_overhead_pct_wall']:+.1f}% "
        f"wall vs a bare megatron-core step (target <= 5%); bare-vs-bare noise "
        f"{figures['bare_spread_pct_cpu']}% CPU, {figures['bare_spread_pct_wall']}% wall"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
