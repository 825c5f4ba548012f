"""Show what packed shards hold: fill, padding, split documents, per-source target vs achieved tokens and
piece-length histograms, and decoded samples with every document boundary marked.

Reads DIR/manifest.json (written by `midtrain pack`) and the shard files next to it.
"""

from __future__ import annotations

import argparse
import json
import sys

EPILOG = """examples:
  midtrain inspect out/shards                      # summary table
  midtrain inspect out/shards --json               # the same as JSON (seq_length, sequences, tokens, fill, sources, ...)
  midtrain inspect out/shards --sample 0 1         # decode packed sequences 0 and 1, boundaries marked
  midtrain inspect out/shards --png lengths.png    # piece-length histogram per source
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shard_dir", metavar="DIR", help="output directory of `midtrain pack`")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--sample", type=int, nargs="*", metavar="I", default=[], help="decode these packed sequences")
    p.add_argument("--split", default="train", choices=["train", "valid"], help="split for --sample (default train)")
    p.add_argument("--png", metavar="PATH", help="write a piece-length histogram per source as PNG")
    p.add_argument("--tokenizer", help="tokenizer to decode with (default: the one recorded in the manifest)")
    p.add_argument("--max-chars", type=int, default=600, help="characters shown per piece in --sample (default 600)")


def run(args: argparse.Namespace) -> int:
    from midtrain.pack.inspect import decode_sample, format_summary, plot_histograms, summarize, tokenizer_for

    try:
        summary = summarize(args.shard_dir)
    except FileNotFoundError as e:
        print(f"midtrain inspect: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=1) if args.json else format_summary(summary))
    if args.png:
        print(f"wrote {plot_histograms(summary, args.png)}")
    if args.sample:
        from midtrain.pack.reader import load_manifest

        tok = tokenizer_for(load_manifest(args.shard_dir), args.tokenizer)
        for i in args.sample:
            try:
                print("\n" + decode_sample(args.shard_dir, i, args.split, tok, args.max_chars))
            except IndexError as e:
                print(f"midtrain inspect: {e}", file=sys.stderr)
                return 1
    return 0
