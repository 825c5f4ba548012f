"""Demo stage: pack WORKDIR/prep/* into WORKDIR/shards at seq_length 2048 (the tiny CPU model's context)."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

DEMO_SEQ_LENGTH = 2048


def demo_stage(workdir: Path) -> str:
    from midtrain.pack.inspect import format_summary, summarize
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack

    prep = Path(workdir) / "prep"
    inputs = sorted(str(d) for d in prep.iterdir() if (d / "documents").is_dir() and any((d / "documents").glob("*.jsonl*"))) \
        if prep.is_dir() else []
    if not inputs:
        raise FileNotFoundError(f"{prep}: no prep outputs with documents; run the prep stage first")
    out = Path(workdir) / "shards"
    # Small data: a larger validation share so every source has held-out documents for the proxy eval.
    cfg = PackConfig(seq_length=DEMO_SEQ_LENGTH, valid_fraction=0.1, tasks=2)
    pack(cfg, inputs, out)  # a no-op when the manifest already matches these inputs and settings
    log.info("\n%s", format_summary(summarize(out)))
    return str(out)
