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
    tokenizer: str | None = None  # tokenizer.json or HF model dir; None = midtrain pack's default tokenizer (Qwen)
    # Share of each trace set held out for the probe's eval loss, by instance (or repository): the set's recorded
    # split (TRACES/heldout.json, midtrain.formats.trace_split), which every pack also leaves out. None = the
    # recorded one, or 0.1 when this probe is the first to decide it; a number that differs from the record fails.
    valid_fraction: float | None = None
    # the run's split file (midtrain.formats.run_split: WORKDIR/split.json): its held-out instances (and their
    # issue <-> pull request links) for every trace set, whatever valid_fraction says; None = the sets' records
    split: str | None = None
    max_traces: int | None = None  # cap on training traces (fixed subset, by id order) so the data set is pinned
    pad_multiple: int = 1  # pad packed pieces to a multiple of this (2*CP on the cluster)
    export_hf: bool = True  # export the result as an HF checkpoint when the HF export is available
    # teacher-forced accuracy on the commands of each held-out trajectory's first N assistant turns
    # (midtrain.eval.command_accuracy: a signal a small model registers where a resolve rate reads 0); 0 = off
    command_turns: int = 0
    train: TrainConfig = field(default_factory=TrainConfig)

    def check(self) -> None:
        require(len(self.traces) > 0, "traces", "needs at least one traces directory")
        require(
            self.valid_fraction is None or 0.0 < self.valid_fraction < 1.0,
            "valid_fraction",
            "must be in (0, 1), or null for the trace set's recorded split",
        )
        require(self.max_traces is None or self.max_traces > 0, "max_traces", "must be positive or null")
        require(self.pad_multiple >= 1, "pad_multiple", "must be >= 1")
        require(self.command_turns >= 0, "command_turns", "must be >= 0 (0: off)")

    def probe_hash(self) -> str:
        """Identity of the probe settings: everything but where it starts from and where it writes."""
        import hashlib
        import json

        d = self.to_dict()
        d.pop("data_dir")
        d["train"].pop("init_from")
        d["train"].pop("run_dir")
        d["train"]["data"].pop("path")
        d["train"].pop("model")  # taken from the start checkpoint (see midtrain.sft.probe)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    def data_hash(self) -> str:
        """Identity of the probe's data: which traces, how split, tokenized and packed."""
        import hashlib
        import json

        key = [
            self.traces,
            self.tokenizer,
            self.valid_fraction,
            self.max_traces,
            self.pad_multiple,
            self.train.data.seq_length,
            self.train.data.seed,
            "turn-split-v1",
        ]  # the packing rules too
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:12]
