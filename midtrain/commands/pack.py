"""Tokenize curated documents with the base model's tokenizer and pack them into long-context shards.

Takes output directories of `midtrain prep` (DIR/documents/*.jsonl.gz), tokenizes each (datatrove stage,
cached under DIR/tokenized/ per tokenizer), then packs best-fit-decreasing into sequences of exactly
--seq-length tokens, splitting only documents longer than that, at file boundaries of packed repositories
or else at line ends. Writes Megatron indexed shards (.bin/.idx; one index document per packed sequence,
its sequences the document pieces) per pack task and split, and manifest.json with everything needed to
reproduce and audit them (`midtrain inspect DIR`). key=value overrides (anywhere on the line) set PackConfig fields:
pad_multiple, seed, valid_fraction, tasks, tokenize_tasks, workers, mixture.* ...
With --executor slurm every stage is a datatrove job array (resources, venv or container and account from
the site config's `prep:` section), chained afterok; the tokenizer file must be on a shared filesystem.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from midtrain.launch.site import load_site
from midtrain.pack.mixture import MixtureConfig
from recipes import resolve_config

if TYPE_CHECKING:
    from midtrain.pack.pack_step import PackConfig

log = logging.getLogger(__name__)

EPILOG = """examples:
  midtrain pack --input out/prep/repos out/prep/pulls --output out/shards --seq-length 262144
  midtrain pack --input out/prep/* --output out/shards --seq-length 2048 --mixture swe_midtrain \\
      pad_multiple=16 valid_fraction=0.01 mixture.total_tokens=500000000000
  midtrain pack --input /lustre/prep/* --output /lustre/shards tasks=512 tokenize_tasks=256 \\
      --executor slurm --site site.yaml --dry-run      # print the sbatch scripts
  midtrain pack --input out/prep/traces --output out/sft --tokenizer ~/models/Qwen3-8B   # local HF dir
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", nargs="+", required=True, metavar="PREP_DIR", help="`midtrain prep` output directories")
    p.add_argument("--output", required=True, metavar="DIR", help="where shards and manifest.json go")
    p.add_argument("--seq-length", type=int, help="tokens per packed sequence (default 262144)")
    p.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json or a local Hugging Face model directory (default: Qwen3's, built offline)",
    )
    p.add_argument("--mixture", metavar="NAME", help="named mixture recipe (`midtrain recipes --kind mixture`)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="PackConfig overrides")
    p.add_argument("--executor", choices=["local", "slurm"], help="where the stages run (default local)")
    p.add_argument("--site", metavar="YAML", help="site config for --executor slurm (default $MIDTRAIN_SITE)")
    p.add_argument("--site-config", dest="site", help=argparse.SUPPRESS)  # deprecated spelling of --site
    p.add_argument("--dry-run", action="store_true", help="print what each stage would submit, run nothing")
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="put the tokenize caches under DIR instead of each PREP_DIR/tokenized/ (read-only inputs)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an earlier pack output in DIR made with other settings or inputs (else refused)",
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved pack config (YAML) and exit")


def build_config(args: argparse.Namespace) -> PackConfig:
    """The PackConfig of the command line: a named mixture recipe, the flags, then overrides."""
    # lazy: loads datatrove only when this runs
    from midtrain.pack.pack_step import pack_config

    mixture = resolve_config(args.mixture, MixtureConfig, "mixture", validate=False) if args.mixture else None
    return pack_config(args.overrides, mixture, args.seq_length, args.tokenizer, args.executor)


EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


def run(args: argparse.Namespace) -> int:
    # lazy: loads datatrove, torch only when this runs
    from midtrain.pack.inspect import format_summary, summarize
    from midtrain.pack.pipeline import pack

    cfg = build_config(args)
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return 0
    if not args.input:
        print("midtrain pack: no --input directories given", file=sys.stderr)
        return 2
    site = None
    if cfg.executor == "slurm":
        site = load_site(args.site)
    try:
        result = pack(
            cfg,
            args.input,
            args.output,
            site=site,
            dry_run=args.dry_run,
            overwrite=args.overwrite,
            cache_dir=args.cache_dir,
        )
    except (FileNotFoundError, FileExistsError, ValueError) as e:
        print(f"midtrain pack: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: finished tasks are kept, a rerun of the same command goes on from them
        print("midtrain pack: interrupted; rerun the same command to continue", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.dry_run:
        for name, script in result.scripts.items():
            print(f"# ---- stage {name} ----\n{script}")
        return 0
    if result.submitted:
        print(f"submitted to Slurm; {args.output}/manifest.json appears when the jobs finish")
        return 0
    print(format_summary(summarize(args.output)))
    return 0
