"""Show what packed shards hold: fill, padding, split documents, per-source target vs achieved tokens and
piece-length histograms, and decoded samples with every document boundary marked; and the data card of a
`midtrain prep` output or of shards (composition by source, language, file kind, repository, removed and
redacted counts, bot share, lengths) written as DIR/datacard.md, .json and .png.

Reads DIR/manifest.json (written by `midtrain pack`) and the shard files next to it, or a prep DIR's
documents/ and stats.json.
"""

from __future__ import annotations

import argparse
import json
import sys

from midtrain.locations import as_path

EPILOG = """examples:
  midtrain inspect out/prep/repos                  # data card of a prep output (also written to DIR/datacard.*)
  midtrain inspect out/shards --card               # shards: summary table, then the data card of their inputs
  midtrain inspect out/shards                      # summary table
  midtrain inspect out/shards --json               # the same as JSON (seq_length, sequences, tokens, fill, sources, ...)
  midtrain inspect out/shards --sample 0 1         # decode packed sequences 0 and 1, boundaries marked
  midtrain inspect out/shards --png lengths.png    # piece-length histogram per source
  midtrain inspect out/shards --split-file out/split.json  # held-out instances, fix commits in train? (exit 1)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shard_dir", metavar="DIR", help="output directory of `midtrain pack` or `midtrain prep`")
    p.add_argument("--card", action="store_true", help="shards: also print and write the data card (DIR/datacard.*)")
    p.add_argument("--top", type=int, default=20, help="repositories listed in the data card (default 20)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--sample", type=int, nargs="*", metavar="I", default=[], help="decode these packed sequences")
    p.add_argument("--split", default="train", choices=["train", "valid"], help="split for --sample (default train)")
    p.add_argument("--png", metavar="PATH", help="write a piece-length histogram per source as PNG")
    p.add_argument("--tokenizer", help="tokenizer to decode with (default: the one recorded in the manifest)")
    p.add_argument(
        "--split-file",
        metavar="SPLIT",
        help="the run's split file to check the training split against by canonical id (default: the one the "
        "pack applied, when it had one); held-out instances found there exit 1",
    )
    p.add_argument(
        "--heldout",
        metavar="PATH",
        help="scan the training split for held-out text by content (13-gram overlap): a probe's data dir "
        "(its valid_docs/) or a JSONL file of {id, text} rows; exit 1 above the leak threshold",
    )
    p.add_argument("--max-chars", type=int, default=600, help="characters shown per piece in --sample (default 600)")


def run(args: argparse.Namespace) -> int:
    # lazy: loads datatrove, torch only when this runs
    from midtrain.pack.datacard import prep_card, shards_card, to_markdown, write_card
    from midtrain.pack.inspect import (
        decode_sample,
        format_heldout_check,
        format_summary,
        heldout_check,
        plot_histograms,
        summarize,
        tokenizer_for,
    )

    directory = as_path(args.shard_dir)  # a local path or a URL (s3://...)
    if not (directory / "manifest.json").exists() and (directory / "documents").is_dir():  # a prep output
        card = prep_card(directory, args.top)
        print(json.dumps(card, indent=1) if args.json else to_markdown(card))
        print("wrote " + ", ".join(str(p) for p in write_card(directory, card)))
        return 0
    try:
        summary = summarize(args.shard_dir)
    except FileNotFoundError as e:
        print(f"midtrain inspect: {e}", file=sys.stderr)
        return 1
    try:
        check = heldout_check(args.shard_dir, args.split_file)
    except (FileNotFoundError, ValueError) as e:
        print(f"midtrain inspect: {e}", file=sys.stderr)
        return 1
    if check is not None:
        summary["heldout_check"] = check
    print(json.dumps(summary, indent=1) if args.json else format_summary(summary))
    if check is not None and not args.json:
        print(format_heldout_check(check))
    if args.card:
        card = shards_card(directory, args.top)
        print("\n" + to_markdown(card))
        print("wrote " + ", ".join(str(p) for p in write_card(directory, card)))
    if args.png:
        print(f"wrote {plot_histograms(summary, args.png)}")
    if args.heldout:
        # lazy: loads datatrove, torch only when this runs
        from midtrain.curate.leak_scan import describe, scan_against
        from midtrain.formats.shard_reader import load_manifest

        scans = scan_against(
            args.heldout, [args.shard_dir], tokenizer_for(load_manifest(args.shard_dir), args.tokenizer)
        )
        for scan in scans:
            print(describe(scan))
        if any(s["leak"] for s in scans):
            return 1
    if args.sample:
        # lazy: loads torch only when this runs
        from midtrain.formats.shard_reader import load_manifest

        tok = tokenizer_for(load_manifest(args.shard_dir), args.tokenizer)
        for i in args.sample:
            try:
                print("\n" + decode_sample(args.shard_dir, i, args.split, tok, args.max_chars))
            except IndexError as e:
                print(f"midtrain inspect: {e}", file=sys.stderr)
                return 1
    return 1 if check is not None and check["in_training"] else 0
