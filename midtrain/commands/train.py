"""Midtrain a GPT-family model on packed shards with megatron-core.

RECIPE is a registered train recipe (`midtrain recipes --kind train`) or a run's config.yaml (to replay a
run). key=value overrides change any field (`midtrain config RECIPE` prints them all). The run directory
(`run_dir=`) receives config.yaml, checkpoints/, metrics.jsonl and tb/ (TensorBoard). A run restarted on
the same run_dir resumes from its newest complete checkpoint. SIGTERM or SIGUSR1 saves a checkpoint and
exits with status 75 ("requeue me").

One CPU process (CPU mode, gloo) or many GPU processes under torchrun / srun: the launcher's RANK /
WORLD_SIZE (or SLURM_PROCID / SLURM_NTASKS) and MASTER_ADDR / MASTER_PORT are read from the environment.
"""

from __future__ import annotations

import argparse
import logging
import sys

from recipes import load_train_config

EPILOG = """examples:
  midtrain train demo_tiny optim.train_steps=4 run_dir=runs/try
  torchrun --nproc-per-node 2 -m midtrain.cli train demo_tiny parallel.tensor=2 optim.train_steps=4 run_dir=runs/tp2
  midtrain train runs/try/config.yaml optim.train_steps=8 optim.schedule_on_resume=config   # extend a run
  torchrun --nproc-per-node 8 -m midtrain.cli train qwen3_8b_256k_h200 precision.fp8=hybrid
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="train recipe name, or a config.yaml written by a previous run")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted field overrides, e.g. optim.lr=1e-3")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")


def run(args: argparse.Namespace) -> int:

    cfg = load_train_config(args.recipe, args.overrides)
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return 0
    # lazy: loads megatron, torch only when this runs
    from midtrain.demo.shards import ensure_demo_shards
    from midtrain.train.checkpoint import CheckpointError
    from midtrain.train.trainer import NonFiniteError, train

    if not logging.getLogger().isEnabledFor(logging.DEBUG):  # -v keeps DEBUG (a failed load's traceback)
        logging.getLogger("midtrain").setLevel(logging.INFO)
    try:
        ensure_demo_shards(cfg)  # the demo recipes train on the demo's own data, built here when missing
        result = train(cfg)
    except FileNotFoundError as e:  # missing shards / init_from: say what, no traceback
        print(f"midtrain train: {e}", file=sys.stderr)
        return 2
    except CheckpointError as e:  # a run dir that cannot be resumed: never a silent restart from step 0
        print(f"midtrain train: cannot resume: {e}", file=sys.stderr)
        return 1
    except NonFiniteError as e:
        print(f"midtrain train: stopped: {e} (guard.on_nonfinite=skip skips such steps)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: no checkpoint is written (SIGTERM/SIGUSR1 write one and exit 75)
        print(
            "midtrain train: interrupted; rerun the same command to resume from the newest checkpoint", file=sys.stderr
        )
        return 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
    return int(result["exit_code"])
