"""A sweep recipe's config: the start checkpoint, the token budget, the base pack/train recipe and the variants.

A variant is a few deltas on the base (never a copy): sources left out, sources prepped again with other
settings, PackConfig overrides (mixture shares, context length) and TrainConfig overrides, and optionally its
own token budget (midtraining length). Everything else — start checkpoint, seed, probe, evals — is shared.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from midtrain.config import Config, require
from midtrain.formats.source_specs import SOURCE_TRAITS
from midtrain.pack.pack_step import PackConfig
from midtrain.protocol import ProtocolConfig

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
RESERVED = ("base", "reference_shards", "report", "sft_data", "slurm")  # directories under OUTPUT the sweep owns


@dataclass
class Variant(Config):
    """Deltas on the sweep's base recipe."""

    about: str = ""  # one line shown in the report
    leave_out: list[str] = field(default_factory=list)  # prep sources (keys of `inputs`) not packed; weight 0
    # prep source -> `midtrain prep` overrides: that source is prepped again for this variant from raw_inputs
    prep: dict[str, list[str]] = field(default_factory=dict)
    pack: list[str] = field(default_factory=list)  # PackConfig overrides, e.g. mixture.weights.trace=0.05
    train: list[str] = field(default_factory=list)  # TrainConfig overrides (model/optimizer deltas)
    train_recipe: str | None = None  # another train recipe (e.g. a 256K layout); None = the sweep's
    tokens: int | None = None  # midtraining tokens; None = the sweep's budget
    seed: int | None = None  # midtraining seed (train.seed, train.data.seed); None = the sweep's


@dataclass
class SweepConfig(Config):
    name: str = "sweep"
    output: str = "runs/sweep"
    # Start of every variant and the no-midtraining baseline: a midtrain run/checkpoint dir or an HF model dir.
    # None = the train recipe's step-0 initialisation, written once to OUTPUT/base (demo scale).
    base: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)  # prep source -> `midtrain prep` output dir
    raw_inputs: dict[str, list[str]] = field(default_factory=dict)  # prep source -> raw inputs (variant re-prep)
    pack: PackConfig = field(default_factory=PackConfig)  # the base pack settings and mixture
    train_recipe: str = "demo_tiny"
    train_overrides: list[str] = field(default_factory=list)  # applied to every variant (before its own)
    tokens: int = 1_000_000  # midtraining token budget per variant (steps = ceil(tokens / (batch x seq_length)))
    seed: int = 1234  # train.seed and train.data.seed of every variant
    baseline: str = "no_midtraining"  # the base checkpoint through the same probe and evals
    variants: dict[str, Variant] = field(default_factory=dict)
    # Probe, evals and seeds; the sweep replaces its checkpoints, baseline, output, report dir and notes.
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    rank_by: str = "SFT probe/held-out loss, assistant tokens"  # report row (group/metric) variants are ranked on
    # The pre-registered primary comparison: these variants are one arm's midtraining seeds (the same settings,
    # Variant.seed apart), compared with the baseline on rank_by, paired over the probe seeds and held-out
    # documents, with a bootstrap interval over all three (midtrain.eval.noise.hierarchical_bootstrap).
    primary: list[str] = field(default_factory=list)
    primary_about: str = ""  # the hypothesis, stated before the run
    # A variant trained at LR 0 (one step through the trainer): its probe must give the baseline's results
    # exactly, else the report fails (the arms are not comparable: something other than midtraining differs).
    null_arm: str | None = None

    def pre_register(self, arm: str, about: str, seeds: Sequence[int], hypothesis: str, null_tokens: int) -> None:
        """Add the primary comparison's arm (ARM, then ARM.s<SEED> for each further seed: one variant per
        midtraining seed, the first at the sweep's seed) and the null arm ``null_lr0`` (one step of NULL_TOKENS
        at LR 0 through the trainer), and name them as the primary and the null arm, stating HYPOTHESIS."""
        for seed in seeds:
            name = arm if seed == self.seed else f"{arm}.s{seed}"
            self.variants[name] = Variant(about=f"{about}; seed {seed}", seed=seed)
            self.primary.append(name)
        self.variants["null_lr0"] = Variant(
            about=f"one midtraining step at LR 0 (must equal {self.baseline})",
            train=["optim.lr=0", "optim.min_lr=0"],
            tokens=null_tokens,
        )
        self.null_arm = "null_lr0"
        self.primary_about = hypothesis

    def check(self) -> None:
        require(len(self.variants) > 0, "variants", "name at least one variant")
        require(bool(self.inputs), "inputs", "name the prep output directories (source -> dir)")
        require(self.tokens > 0, "tokens", "must be positive")
        bad = [s for s in self.inputs if s not in SOURCE_TRAITS]
        require(not bad, "inputs", f"unknown prep sources {bad}; choose from {sorted(SOURCE_TRAITS)}")
        for name in [self.baseline, *self.variants]:
            require(
                bool(_NAME.match(name)),
                "variants",
                f"name '{name}' must be letters, digits, '_', '-', '.' (it becomes a directory)",
            )
            require(name not in RESERVED, "variants", f"name '{name}' is reserved for {RESERVED}")
        require(self.baseline not in self.variants, "baseline", f"'{self.baseline}' is also a variant name")
        for name, v in self.variants.items():
            where = f"variants.{name}"
            missing = [s for s in [*v.leave_out, *v.prep] if s not in self.inputs]
            require(not missing, f"{where}", f"sources {missing} are not in inputs {sorted(self.inputs)}")
            require(len(v.leave_out) < len(self.inputs), f"{where}.leave_out", "leaves every source out")
            no_raw = [s for s in v.prep if not self.raw_inputs.get(s)]
            require(not no_raw, f"{where}.prep", f"re-prepping {no_raw} needs raw_inputs.<source>")
            require(v.tokens is None or v.tokens > 0, f"{where}.tokens", "must be positive")
            for item in [*v.pack, *v.train, *[o for ov in v.prep.values() for o in ov]]:
                require("=" in item, where, f"'{item}' is not of the form key=value")
        unknown = [n for n in [*self.primary, *([self.null_arm] if self.null_arm else [])] if n not in self.variants]
        require(not unknown, "primary", f"{unknown} are not variants ({sorted(self.variants)})")
        seeds = [self.variants[n].seed or self.seed for n in self.primary]
        require(len(set(seeds)) == len(seeds), "primary", f"the arm's variants must differ in seed (got {seeds})")
        for item in self.train_overrides:
            require("=" in item, "train_overrides", f"'{item}' is not of the form key=value")
