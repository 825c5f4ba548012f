"""Plan a data-prep + training run before spending it: core-hours, disk and --tasks per stage, training time.

From per-core rates, the input size per source (bytes, or tokens: 5e9tok, 100Gtok) and a target mixture,
prints per source and stage (read, curate, tokenize, pack) the core-hours, the disk the stage writes and a
suggested --tasks (one task about --task-hours on one core), the tokens available after curation against
the mixture's target, the --tasks of each prep run and of the pack run, and the training time at
--tokens-per-s-per-gpu on --gpus GPUs.

Rates are MB/s of input per core. The defaults were measured with bench/ on a loaded 2-core VM; measure on
your own nodes and pass the JSON that bench/bench_prep.py, bench/bench_curate_speed.py and bench/bench_tokenize.py
write with --json (--rates FILE ...), or set single rates with --rate (a source name sets its read rate;
curate, tokenize, pack set that stage's). Every figure is a model, as good as the rates and the assumed
fractions (--keep, --bytes-per-token, --gzip-ratio).
"""

from __future__ import annotations

import argparse
import sys

from midtrain.launch.plan import (
    DEFAULT_KEEP,
    SOURCES,
    STAGES,
    format_plan,
    human,
    load_rates,
    parse_pairs,
    parse_size,
    plan,
    training_hours,
)

EPILOG = """examples:
  midtrain plan --total-tokens 500e9 --gpus 512 --tokens-per-s-per-gpu 8000 \\
      --input repos=3TB commits=1TB pulls=200GB traces=50GB buildlogs=300GB \\
      --mixture repos=0.55 commits=0.15 pulls=0.1 traces=0.1 buildlogs=0.1
  midtrain plan --total-tokens 20e9 --gpus 8 --tokens-per-s-per-gpu 9000 --input repos=40Gtok traces=2Gtok \\
      --mixture repos=0.9 traces=0.1 --rate curate=2.0 repos=1.1 --task-hours 1
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input",
        nargs="+",
        required=True,
        metavar="SOURCE=SIZE",
        help="input size per source: repos=3TB, traces=2Gtok (tokens) ...",
    )
    p.add_argument("--mixture", nargs="+", required=True, metavar="SOURCE=SHARE", help="token share per source")
    p.add_argument("--total-tokens", type=float, required=True, help="tokens of the training run (e.g. 500e9)")
    p.add_argument("--tokens-per-s-per-gpu", type=float, required=True, help="measured training throughput")
    p.add_argument("--gpus", type=int, required=True, help="GPUs of the training run")
    p.add_argument("--rates", nargs="+", metavar="FILE", help="--json outputs of bench_prep/curate/tokenize.py")
    p.add_argument(
        "--rate",
        nargs="+",
        metavar="KEY=MB/s",
        help="one rate per core: SOURCE (read), curate, tokenize or pack (applied after --rates)",
    )
    p.add_argument("--keep", nargs="+", metavar="SOURCE=FRACTION", help="input bytes kept by curation per source")
    p.add_argument("--bytes-per-token", type=float, default=3.5, help="text bytes per token (code, Qwen3: ~3.5)")
    p.add_argument("--gzip-ratio", type=float, default=0.3, help="JSONL.gz bytes per text byte")
    p.add_argument("--max-repeat", type=float, default=4.0, help="mixture.max_repeat: most epochs of a source")
    p.add_argument("--task-hours", type=float, default=2.0, help="target duration of one task on one core")


def run(args: argparse.Namespace) -> int:

    try:
        inputs = parse_pairs(args.input, "--input", parse_size)
        mixture = parse_pairs(args.mixture, "--mixture")
        keep = {**DEFAULT_KEEP, **parse_pairs(args.keep, "--keep")}
        rates = load_rates(args.rates, parse_pairs(args.rate, "--rate", keys=SOURCES + STAGES[1:]))
        if args.gpus < 1 or args.tokens_per_s_per_gpu <= 0 or args.total_tokens <= 0:
            raise ValueError("--gpus, --tokens-per-s-per-gpu and --total-tokens must be positive")
        result = plan(
            inputs, mixture, args.total_tokens, rates, keep, args.bytes_per_token, args.gzip_ratio, args.max_repeat
        )
    except (ValueError, OSError) as e:
        print(f"midtrain plan: {e}", file=sys.stderr)
        return 2
    print(format_plan(result, args.task_hours, args.max_repeat))
    hours = training_hours(args.total_tokens, args.tokens_per_s_per_gpu, args.gpus)
    print(
        f"\ntraining: {human(args.total_tokens, 'tok')} at {args.tokens_per_s_per_gpu:,.0f} tokens/s/GPU on "
        f"{args.gpus} GPUs = {hours:,.1f} hours ({hours / 24:.1f} days, {hours * args.gpus:,.0f} GPU-hours)"
    )
    return 0
