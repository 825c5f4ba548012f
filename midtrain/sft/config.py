"""The fixed SFT probe's configuration: which traces, how they are rendered and packed, how long it trains.

A protocol pins one SFT recipe for every checkpoint it compares, so the only difference between two probe
runs is the checkpoint they start from (`--from`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from midtrain.config import Config, require
from midtrain.train.config import TrainConfig


@dataclass
class SFTConfig(Config):
    """Traces -> chat-template rendering with assistant-only loss spans -> packed shards -> train(cfg)."""

    name: str = "sft_probe"
    # `midtrain prep traces --output DIR` directories (trace Documents under DIR/documents/).
    traces: list[str] = field(default_factory=lambda: [".demo/prep/traces"])
    # Rendered + packed SFT data; None = OUTPUT/data. A protocol points every checkpoint at one shared dir.
    data_dir: str | None = None
    tokenizer: str | None = None  # tokenizer.json or HF model dir; None = the pack team's default (Qwen)
    valid_fraction: float = 0.1  # share of traces held out (by document id hash) for the probe's eval loss
    max_traces: int | None = None  # cap (fixed subset, by id order) so the data set is pinned
    export_hf: bool = True  # export the result as an HF checkpoint when the HF export is available
    train: TrainConfig = field(default_factory=TrainConfig)

    def check(self) -> None:
        require(len(self.traces) > 0, "traces", "needs at least one traces directory")
        require(0.0 <= self.valid_fraction < 1.0, "valid_fraction", "must be in [0, 1)")
        require(self.max_traces is None or self.max_traces > 0, "max_traces", "must be positive or null")
