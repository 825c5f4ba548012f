"""`midtrain` command line: one subcommand per stage of the flow.

Each command is a module (``midtrain/commands/<name>.py``; the demo's is ``midtrain/demo``) with
``add_arguments(parser)`` and ``run(args) -> int``; this file only lists and wires them up.
Every parser is a :class:`midtrain.cli_parser.OverrideParser`: a command that declares a positional
``overrides`` takes ``key=value`` words anywhere on its command line (see that module).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import sys
import textwrap
from dataclasses import dataclass

from midtrain.cli_parser import OverrideParser
from midtrain.config import ConfigError
from midtrain.formats.outputs import EXIT_REFUSED, OutputRefused
from midtrain.train.config import TrainConfig
from midtrain.train.estimate import summary
from recipes import all_recipes, get_recipe


@dataclass(frozen=True)
class Command:
    name: str
    module: str  # provides add_arguments(parser) and run(args) -> int
    help: str
    example: str


COMMANDS = [
    Command(
        "prep",
        "midtrain.commands.prep",
        "turn raw SWE data into curated documents (datatrove)",
        "midtrain prep repos --input ~/src/myrepo --output out/prep/repos",
    ),
    Command(
        "pack",
        "midtrain.commands.pack",
        "tokenize documents and pack them into long-context shards",
        "midtrain pack --input out/prep/repos out/prep/pulls --output out/shards --seq-length 262144",
    ),
    Command(
        "split",
        "midtrain.commands.split",
        "decide a run's held-out split once from all its inputs (one file for every pack and the probe)",
        "midtrain split --input out/prep/repos out/prep/traces --output out/split.json",
    ),
    Command(
        "inspect",
        "midtrain.commands.inspect",
        "show packed shards (fill, splits, samples) or a data card",
        "midtrain inspect out/shards --json",
    ),
    Command(
        "train",
        "midtrain.commands.train",
        "midtrain a model on packed shards (megatron-core)",
        "midtrain train demo_tiny optim.train_steps=10 run_dir=runs/try",
    ),
    Command(
        "sft",
        "midtrain.commands.sft",
        "run the fixed short SFT probe on a checkpoint",
        "midtrain sft sft_probe_demo --from runs/demo_tiny",
    ),
    Command(
        "eval",
        "midtrain.commands.eval",
        "proxy metrics and SWE-bench runs for a checkpoint",
        "midtrain eval proxy --checkpoint runs/demo_tiny --shards out/shards",
    ),
    Command(
        "report",
        "midtrain.commands.report",
        "compare checkpoints side by side (Markdown + PNG)",
        "midtrain report runs/base runs/midtrained --output report/",
    ),
    Command(
        "submit",
        "midtrain.commands.submit",
        "submit training or the protocol to Slurm",
        "midtrain submit train qwen3_8b_256k_h200 --nodes 32 --dry-run",
    ),
    Command(
        "convert",
        "midtrain.commands.convert",
        "convert checkpoints between Hugging Face and megatron-core",
        "midtrain convert hf2mcore ~/models/Qwen3-1.7B ckpt/qwen3-1.7b --tp 2",
    ),
    Command(
        "decontam",
        "midtrain.commands.decontam",
        "build the benchmark content index prep decontaminates with",
        "midtrain decontam index benchorg/benchlib=tests/data/decontam/benchorg__benchlib "
        "--output /tmp/bench_index.json.gz",
    ),
    Command(
        "sweep",
        "midtrain.commands.sweep",
        "run ablation variants through the fixed SFT probe, ranked",
        "midtrain sweep sweep_demo --dry-run",
    ),
    Command(
        "plan",
        "midtrain.commands.plan",
        "core-hours, disk, --tasks and training time of a run, before it",
        "midtrain plan --total-tokens 500e9 --gpus 512 --tokens-per-s-per-gpu 8000 --input repos=3TB --mixture repos=1",
    ),
    Command(
        "demo",
        "midtrain.demo",
        "run the whole pipeline on the embedded sample data (CPU)",
        "midtrain demo --workdir .demo",
    ),
]


def _add_recipes(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recipes",
        help="list the registered recipes",
        description="List every recipe by name, kind and one-line description.",
        epilog="example:\n  midtrain recipes --kind train",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--kind", help="only recipes of this kind (train, sft, mixture, protocol)")
    p.set_defaults(_run=_run_recipes)


def _run_recipes(args: argparse.Namespace) -> int:

    rows = [r for r in all_recipes().values() if not args.kind or r.kind == args.kind]
    width = max((len(r.name) for r in rows), default=10)
    for r in rows:
        print(f"{r.name:<{width}}  {r.kind:<8}  {r.doc}")
    return 0


def _add_config(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "config",
        help="print any stage's resolved config as YAML (a recipe, prep SOURCE, pack)",
        description="Resolve a config with key=value overrides (typed; unknown keys rejected), validate it, and "
        "print the YAML. RECIPE is any recipe (train, sft, mixture, protocol: `midtrain recipes`); "
        "`prep SOURCE` prints that source's reader config and every curation field; `pack` prints "
        "the pack config with its mixture. Recipes that describe a model also print its size and "
        "memory estimate. Each command also takes --print-config with its own flags.",
        epilog="examples:\n  midtrain config demo_tiny optim.lr=1e-3 data.seq_length=4096\n"
        "  midtrain config demo_tiny --yaml-only > run.yaml\n"
        "  midtrain config prep repos repos.max_doc_bytes=500000 redact.enabled=false\n"
        "  midtrain config pack seq_length=4096 pad_multiple=16\n"
        "  midtrain config protocol_demo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("recipe", metavar="RECIPE|prep|pack", help="recipe name (see `midtrain recipes`), prep or pack")
    p.add_argument("source", nargs="?", help="for prep: the source (repos, commits, pulls, buildlogs, traces)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted field overrides")
    p.add_argument("--yaml-only", action="store_true", help="print only the YAML, no estimates")
    p.set_defaults(_run=_run_config)


def _run_config(args: argparse.Namespace) -> int:
    if args.recipe == "prep":
        # lazy: loads datatrove only when this runs
        from midtrain.sources.prep import config_yaml

        if not args.source:
            raise ConfigError("source: `midtrain config prep SOURCE` needs the source (repos, commits, ...)")
        print(config_yaml(args.source, args.overrides), end="")
        return 0
    if args.source:
        raise ConfigError(f"'{args.source}' is not of the form key=value (only `config prep` takes a SOURCE)")
    if args.recipe == "pack":
        # lazy: loads datatrove only when this runs
        from midtrain.pack.pack_step import pack_config

        print(pack_config(args.overrides).to_yaml(), end="")
        return 0

    cfg = get_recipe(args.recipe).build(args.overrides).validate()
    print(cfg.to_yaml(), end="")
    if not args.yaml_only and isinstance(cfg, TrainConfig):  # a model: its size, FLOPs and memory per GPU
        print(textwrap.indent(summary(cfg), "# "))
    return 0


def _add_stage(sub: argparse._SubParsersAction, cmd: Command) -> None:
    module = importlib.import_module(cmd.module)
    p = sub.add_parser(
        cmd.name,
        help=cmd.help,
        description=(module.__doc__ or cmd.help).strip(),
        epilog=getattr(module, "EPILOG", f"example:\n  {cmd.example}"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(p)
    p.set_defaults(_run=module.run)


def build_parser() -> argparse.ArgumentParser:
    parser = OverrideParser(
        prog="midtrain",
        description="Midtraining stack: prep -> pack -> train -> sft probe -> eval -> report.",
        epilog="Run `midtrain COMMAND --help` for each command's arguments and an example.\n"
        "Start with `make demo`: the whole flow on the embedded sample data, on CPU.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in COMMANDS:
        _add_stage(sub, cmd)
    _add_recipes(sub)
    _add_config(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    args.runner = main  # the flows (protocol, sweep, demo) run their steps' command lines through it
    try:
        return int(args._run(args) or 0)
    except ConfigError as e:
        print(f"midtrain {args.command}: config error: {e}", file=sys.stderr)
        return 2
    except OutputRefused as e:  # another holder, or an output of other inputs: formats.outputs says which
        print(f"midtrain {args.command}: refused: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as e:
        # A full disk or an unwritable path is the user's to fix: say what and where, not a traceback
        # (which -v still shows). Outputs are written to temporary names first, so nothing half-written
        # is left where a later stage would read it.
        if args.verbose:
            raise
        where = f": {e.filename}" if e.filename else ""
        hint = " (disk full or file-size limit?)" if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) else ""
        print(f"midtrain {args.command}: I/O error: {e.strerror or e}{where}{hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
