"""Run the fixed short SFT probe on a checkpoint.

Renders the probe recipe's agent traces with the model's chat template (loss only on assistant turns),
packs them with document masking, trains with the recipe's pinned steps / LR schedule / batch / seed from
--from (weights only), and scores the held-out traces. Every checkpoint of a comparison gets the same
recipe, so differences come from midtraining alone. Writes OUTPUT/sft_result.json, OUTPUT/run/ (the
trainer's run dir) and OUTPUT/hf/ (when the HF export is available). Exit 75: checkpointed on a signal,
rerun to resume.
"""

from __future__ import annotations

import argparse
import sys

from midtrain.sft.config import SFTConfig
from midtrain.sft.probe import run_probe
from recipes import resolve_config

EPILOG = """examples:
  midtrain sft sft_probe_demo --from .demo/runs/demo_tiny --output runs/probe/mid
  midtrain sft sft_probe_demo --from runs/base --output runs/probe/base data_dir=runs/probe/sft_data train.optim.lr=5e-4
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="SFT probe recipe (see `midtrain recipes --kind sft`)")
    p.add_argument("--from", dest="start", required=True, help="checkpoint: midtrain run/checkpoint dir or HF dir")
    p.add_argument("--output", required=True, help="probe output directory")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="SFTConfig overrides (e.g. data_dir=...)")
    p.add_argument("--print-config", action="store_true", help="print the resolved probe config (YAML) and exit")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="rerun afresh when OUTPUT (or data_dir) holds a run of another start or other settings "
        "(default: refuse, naming the difference)",
    )


def run(args: argparse.Namespace) -> int:

    cfg = resolve_config(args.recipe, SFTConfig, "sft", args.overrides)
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return 0
    try:
        result = run_probe(cfg, args.start, args.output, recipe=args.recipe, overwrite=args.overwrite)
    except ValueError as e:
        # the probe's refusals (another start or settings in --output, another held-out split or chat template,
        # a split file that is not one) are ValueErrors naming what to change: one line, not a traceback (-v)
        if getattr(args, "verbose", False):
            raise
        print(f"midtrain sft: {e}", file=sys.stderr)
        return 1
    return int(result["exit_code"])
