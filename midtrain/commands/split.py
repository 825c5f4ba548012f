"""Decide a run's held-out split once, from all its inputs, before any pack reads them.

`midtrain split --input PREP_DIR... --output RUN/split.json` reads every document of the inputs (each source's
`midtrain prep` output) and records midtrain.formats.run_split's decision: the held-out task instances by
canonical id (with issue <-> pull request links), the validation repositories (one set for every source), the
held-out instances' fix commits, the fractions and a hash. Give the file to every pack (`midtrain pack ...
split=FILE`) and the probe (`midtrain sft ... split=FILE`) of the run; the demo, sweeps and the real-model
experiment write and pass theirs. A rerun with the same inputs and fractions keeps the file.
"""

from __future__ import annotations

import argparse

from midtrain.formats.run_split import decide_once
from midtrain.formats.trace_split import DEFAULT_FRACTION
from midtrain.pack.pack_step import PackConfig

EPILOG = """examples:
  midtrain split --input out/prep/* --output out/split.json   # then: midtrain pack ... split=out/split.json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", nargs="+", required=True, metavar="DIR", help="every pack input of the run")
    p.add_argument("--output", required=True, metavar="FILE", help="the run's split file (e.g. RUN/split.json)")
    p.add_argument(
        "--heldout-fraction",
        type=float,
        default=DEFAULT_FRACTION,
        help=f"share of task instances held out for the SFT probe (default {DEFAULT_FRACTION})",
    )
    p.add_argument(
        "--valid-fraction",
        type=float,
        default=PackConfig.valid_fraction,
        help=f"share of repositories (else documents) validated (default {PackConfig.valid_fraction}, the pack's)",
    )


def run(args: argparse.Namespace) -> int:

    split = decide_once(args.output, args.input, args.heldout_fraction, args.valid_fraction, "midtrain split")
    s = split.summary()
    print(
        f"{args.output}: {s['heldout_instances']} held-out instances of {split.record['instances']}, "
        f"{len(s['validation_repositories'])} validation repositories of {split.record['repositories']}, "
        f"{s['fix_commits']} fix commits left out (sha {s['sha']})"
    )
    return 0
