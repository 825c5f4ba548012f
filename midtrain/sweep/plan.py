"""A sweep as commands: per variant the ordered ``(step, midtrain argv)`` chain, plus shared setup and report.

Layout under OUTPUT (absolute): ``base/`` (the step-0 start when the recipe names none), ``reference_shards/``
(every input packed with the base settings: the proxy evals' fixed held-out set, and it fills the tokenized
caches every variant reuses), ``<variant>/`` with ``prep/<source>/`` (re-prepped sources only), ``shards/``,
``run/`` (midtraining), ``variant.json`` (the resolved deltas), then the protocol's ``sft*/`` and ``proxy*/``;
``<baseline>/`` (the start checkpoint through the same probe and evals), ``sft_data*/`` and ``report/``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from midtrain.chains import Chains, Step
from midtrain.config import ConfigError
from midtrain.eval.results import PROXY_RESULT, SFT_RESULT, seed_dir
from midtrain.formats.run_split import SPLIT_FILE
from midtrain.formats.source_specs import prep_doc_source
from midtrain.pack.pack_step import PackConfig
from midtrain.protocol import ProtocolConfig, protocol_steps
from midtrain.sft.config import SFTConfig
from midtrain.sources.prep import split_overrides
from midtrain.sources.specs import SOURCE_SPECS
from midtrain.sweep_config import SweepConfig
from midtrain.train.run_stamp import finished, run_changes
from recipes import load_train_config, resolve_config

if TYPE_CHECKING:
    from midtrain.train.config import TrainConfig

Steps = list[Step]
STAMP = "variant.json"


def output_dir(cfg: SweepConfig) -> Path:
    return Path(cfg.output).absolute()


def base_checkpoint(cfg: SweepConfig) -> str:
    """Absolute: Slurm jobs run in the site's workdir, not where the sweep was submitted from."""
    return str(Path(cfg.base).absolute()) if cfg.base else str(output_dir(cfg) / "base")


def reference_shards(cfg: SweepConfig) -> Path:
    return output_dir(cfg) / "reference_shards"


def split_file(cfg: SweepConfig) -> Path:
    """The sweep's one held-out split (midtrain.formats.run_split): the base pack's ``split``, else
    OUTPUT/split.json, decided by the first setup step from every input."""
    return Path(cfg.pack.split).absolute() if cfg.pack.split else output_dir(cfg) / SPLIT_FILE


def split_argv(cfg: SweepConfig) -> list[str]:
    """`midtrain split` over every input, at the larger of the pack's and the probe's held-out fractions (the
    sets are nested: the larger holds out all the smaller would), the pack's validation fraction."""

    probe = resolve_config(cfg.protocol.sft_recipe, SFTConfig, "sft", list(cfg.protocol.sft_overrides))
    fraction = max(cfg.pack.heldout_fraction, probe.valid_fraction or 0.0)
    inputs = [str(Path(p).absolute()) for p in cfg.inputs.values()]
    return ["split", "--input", *inputs, "--output", str(split_file(cfg))] + [
        f"--heldout-fraction={fraction}",
        f"--valid-fraction={cfg.pack.valid_fraction}",
    ]


@dataclass
class VariantPlan:
    name: str
    about: str
    root: Path
    inputs: list[str]  # prep dirs packed
    prep: Steps  # re-prep steps (may be empty)
    pack: PackConfig
    train_overrides: list[str]
    tokens: int  # budget
    train_steps: int
    batch: int  # global batch size (sequences per step)
    train_recipe: str

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def shards(self) -> Path:
        return self.root / "shards"

    def train_config(self) -> TrainConfig:
        """The training the train step runs (``midtrain train RECIPE OVERRIDES`` resolves the same)."""

        return load_train_config(self.train_recipe, self.train_overrides)

    def trained(self) -> bool:
        """Whether run/ holds this variant's training, finished (with its settings: a changed recipe is not)."""

        return finished(self.run_dir, self.train_config())

    def stamp(self) -> dict[str, Any]:
        # a prep Step as its [name, argv] pair: the stamp's JSON stays what it was before steps became Steps
        return {
            "inputs": self.inputs,
            "prep": [[s.name, s.argv] for s in self.prep],
            "pack": self.pack.to_dict(),
            "train_recipe": self.train_recipe,
            "train_overrides": self.train_overrides,
            "tokens": self.tokens,
            "train_steps": self.train_steps,
        }


def _check_prep(variant: str, source: str, overrides: list[str]) -> None:
    """A re-prep's overrides must name real fields of the source's config (checked before anything runs)."""

    mine, _ = split_overrides(source, overrides)
    try:
        SOURCE_SPECS[source].config().apply_overrides(mine).validate()
    except ConfigError as e:
        raise ConfigError(f"variants.{variant}.prep.{source}: {e}") from None


def _reads_run_split(source: str) -> bool:

    return "run_split" in {f.name for f in fields(SOURCE_SPECS[source].config)}


def pack_argv(pack: PackConfig, inputs: list[str], output: Path) -> list[str]:
    return ["pack", "--input", *inputs, "--output", str(output), *pack.to_overrides()]


def variant_plan(cfg: SweepConfig, name: str) -> VariantPlan:

    v = cfg.variants[name]
    root = output_dir(cfg) / name
    prep_steps: Steps = []
    inputs = []
    for source, path in cfg.inputs.items():
        if source in v.leave_out:
            continue
        if source in v.prep:
            _check_prep(name, source, v.prep[source])
            out = root / "prep" / source
            # a source prepped after the split leaves the held-out fixes out where its reader can (commits)
            extra = [f"{source}.run_split={split_file(cfg)}"] if _reads_run_split(source) else []
            prep_steps.append(
                Step(
                    f"prep_{source}",
                    ["prep", source, *v.prep[source], *extra, "--input", *cfg.raw_inputs[source], "--output", str(out)],
                )
            )
            path = str(out)
        inputs.append(str(Path(path).absolute()))
    pack = cfg.pack.apply_overrides([*v.pack, f"split={split_file(cfg)}"])  # the sweep's one split, every variant
    if v.leave_out:  # a left-out source gets no mixture share (its weight would ask for tokens nobody has)
        gone = {prep_doc_source(s) for s in v.leave_out}
        pack.mixture.weights = {s: w for s, w in pack.mixture.weights.items() if s not in gone}
        pack.mixture.tokens = {s: t for s, t in pack.mixture.tokens.items() if s not in gone}
    try:
        pack.validate()
    except ConfigError as e:
        raise ConfigError(f"variants.{name}.pack: {e}") from None
    shared = [*cfg.train_overrides, *v.train]
    recipe = v.train_recipe or cfg.train_recipe
    try:
        tcfg = load_train_config(recipe, shared)
    except ConfigError as e:
        raise ConfigError(f"variants.{name}.train: {e}") from None
    tokens = v.tokens or cfg.tokens
    steps = math.ceil(tokens / (tcfg.optim.global_batch_size * pack.seq_length))
    train = [
        *shared,
        f"name={cfg.name}-{name}",
        f"run_dir={root / 'run'}",
        f"data.path={root / 'shards'}",
        f"data.seq_length={pack.seq_length}",
        f"init_from={base_checkpoint(cfg)}",
        f"seed={v.seed or cfg.seed}",
        f"data.seed={v.seed or cfg.seed}",
        f"optim.train_steps={steps}",
        f"optim.warmup_steps={min(tcfg.optim.warmup_steps, steps)}",
    ]
    try:
        load_train_config(recipe, train)
    except ConfigError as e:
        raise ConfigError(f"variants.{name}: the resolved training run is invalid: {e}") from None
    return VariantPlan(
        name, v.about, root, inputs, prep_steps, pack, train, tokens, steps, tcfg.optim.global_batch_size, recipe
    )


def sweep_protocol(cfg: SweepConfig) -> ProtocolConfig:
    """The sweep's protocol: the baseline and every variant's midtrained run, evals on the reference shards."""
    out = output_dir(cfg)
    p = ProtocolConfig.from_dict(cfg.protocol.to_dict())
    p.name = cfg.name
    p.output = str(out)
    p.checkpoints = {cfg.baseline: base_checkpoint(cfg), **{name: str(out / name / "run") for name in cfg.variants}}
    p.baseline = cfg.baseline
    p.report_dir = str(out / "report")
    if not any(o.startswith("split=") for o in p.sft_overrides):  # the probe holds out what no pack trained on
        p.sft_overrides = [*p.sft_overrides, f"split={split_file(cfg)}"]
    if "traces" in cfg.inputs and not any(o.startswith("traces=") for o in p.sft_overrides):
        p.sft_overrides = [*p.sft_overrides, f"traces=[{Path(cfg.inputs['traces']).absolute()}]"]
    if "repos" in cfg.inputs and p.proxy.retrieval.repos is not None:  # the haystacks: the sweep's own repos
        p.proxy.retrieval.repos = str(Path(cfg.inputs["repos"]).absolute())
    if "proxy" in p.evals and p.proxy.shards is None:
        p.proxy.shards = str(reference_shards(cfg))
    p.notes = {cfg.baseline: "the start checkpoint, not midtrained", **{n: v.about for n, v in cfg.variants.items()}}
    return p.validate()


def setup_steps(cfg: SweepConfig, self_argv: list[str]) -> Steps:
    """Before every chain: the step-0 start (when the recipe names no base) and the reference shards."""
    steps: Steps = [] if cfg.pack.split else [Step("split", split_argv(cfg))]  # before any pack reads the inputs
    if cfg.base is None:
        steps.append(Step("init_base", ["sweep", *self_argv, "--init-base"]))
    reference = cfg.pack.replace(split=str(split_file(cfg)))
    steps.append(
        Step(
            "pack_reference",
            pack_argv(reference, [str(Path(p).absolute()) for p in cfg.inputs.values()], reference_shards(cfg)),
        )
    )
    return steps


def sweep_chains(cfg: SweepConfig) -> tuple[dict[str, VariantPlan], Chains]:
    """Per name (baseline first), the chain: [prep..., pack, train] for a variant, then probe + evals.

    Only the training step knows it is done (its final checkpoint): prep and pack resume or are no-ops for the
    same settings and refuse other settings, and the probe and evals skip themselves."""
    proto = protocol_steps(sweep_protocol(cfg))
    plans = {name: variant_plan(cfg, name) for name in cfg.variants}
    chains = {cfg.baseline: proto[cfg.baseline]}
    for name, plan in plans.items():
        train = Step(
            "train",
            ["train", plan.train_recipe, *plan.train_overrides],
            done=plan.trained,
        )
        chains[name] = [*plan.prep, Step("pack", pack_argv(plan.pack, plan.inputs, plan.shards)), train, *proto[name]]
    return plans, chains


def report_argv(self_argv: list[str]) -> list[str]:
    return ["sweep", *self_argv, "--report"]


def check_stamp(plan: VariantPlan, write: bool) -> None:
    """A variant's directory belongs to one resolved variant: refuse to mix runs of a changed definition, and a
    training in run/ of other settings than the variant's now (its recipe changed since: variant.json names the
    recipe, not its content), which would otherwise be reused, or resumed under the new settings."""

    path = plan.root / STAMP
    stamp = plan.stamp()
    if path.exists():
        old = json.loads(path.read_text())
        if old != stamp:
            changed = sorted(k for k in stamp if old.get(k) != stamp[k])
            raise ConfigError(
                f"variants.{plan.name}: {plan.root} holds a run of this variant with other settings "
                f"({', '.join(changed)} changed); use another output or remove that directory"
            )
    trained = run_changes(plan.run_dir, plan.train_config())
    if trained:
        raise ConfigError(
            f"variants.{plan.name}: {plan.run_dir} holds a training with other settings than the variant's now "
            f"({'; '.join(trained)}); use another output or remove that directory"
        )
    if not path.exists() and write:
        plan.root.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stamp, indent=2))


def complete(cfg: SweepConfig, name: str) -> bool:
    """Whether NAME's probe (every seed) and proxy evals have finished: a rerun leaves it as it is."""
    proto = sweep_protocol(cfg)
    root = output_dir(cfg) / name
    dirs = [root / seed_dir("sft", s) / SFT_RESULT for s in ([None, *proto.probe_seeds[1:]])]
    if "proxy" in proto.evals:
        dirs += [root / seed_dir("proxy", s) / PROXY_RESULT for s in ([None, *proto.proxy_seeds[1:]])]
    for path in dirs:
        try:
            if json.loads(path.read_text()).get("exit_code", 0) != 0:
                return False
        except (OSError, ValueError):
            return False
    return True
