"""The resume pre-check: whether RUN_DIR holds a run this config may resume (or extend), decided before anything
is written and before the model is built, on every rank alike; and what run_info.json records of its inputs.

The decision is the ledger's (formats.outputs: ``POLICIES["train"]``, :func:`~midtrain.formats.outputs.decide`): the
stamp of the run as it stands (config.yaml, the content id of its shards in run_info.json, and what the checkpoint
the resume loads records: model shape, data position, LR schedule) against the stamp of this config. A stamp holds
only what a resume cannot change (train.config.RESUME_FIXED, the shards and their order, the schedule); the rest,
throughput knobs included (parallel layout, kernels, batch), may change on a resume and is left out. The rules
that are the trainer's own:

- a field is compared only where both the run recorded it and this config has it (an older midtrain recorded
  fewer: what it did not record is not refused);
- ``optim.schedule_on_resume`` other than ``strict`` takes the schedule out of the comparison (an extension of
  ``train_steps``, a new lr: train.trainer restores the schedule it names);
- the refusal is a ConfigError that starts with the config field to change and says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from midtrain.config import ConfigError
from midtrain.formats.outputs import OutputRefused, decide, make_stamp
from midtrain.formats.rundir import CONFIG
from midtrain.formats.shard_reader import MANIFEST, load_manifest
from midtrain.formats.stamp import TRAINING, shards_id, stale_details
from midtrain.train import checkpoint as ckpt
from midtrain.train.config import RESUME_FIXED, SCHEDULE_FIELDS, TrainConfig, read_run_config
from midtrain.train.run_stamp import input_ids, recorded_inputs


@dataclass(frozen=True)
class _Run:
    """What a resume continues, read once: the run directory, its config.yaml (None: gone) and the shards'
    manifest at data.path (None: none there)."""

    run_dir: Path
    saved: TrainConfig | None
    manifest: dict[str, Any] | None


def schedule_of(cfg: TrainConfig) -> dict[str, Any]:
    """The LR/WD schedule a checkpoint records: the SCHEDULE_FIELDS of the optimizer config."""
    return {k: getattr(cfg.optim, k) for k in SCHEDULE_FIELDS}


def recorded_schedule(common: dict[str, Any]) -> dict[str, Any]:
    """The schedule a checkpoint's common state records, the fields it lacks left out; one from before the
    schedule was recorded is read from megatron's scheduler state."""
    saved = common.get("schedule")
    if saved is None:
        sched = common.get("scheduler") or {}
        styles = {"WSD": "wsd", "cosine": "cosine", "constant": "constant"}
        saved = {
            "lr": sched.get("max_lr"),
            "min_lr": sched.get("min_lr"),
            "warmup_steps": sched.get("lr_warmup_steps"),
            "decay_style": styles.get(sched.get("lr_decay_style", "")),
            "weight_decay": sched.get("start_wd"),
        }
    return {f"optim.{k}": saved[k] for k in SCHEDULE_FIELDS if saved.get(k) is not None}


def schedule_conflicts(common: dict[str, Any], cfg: TrainConfig) -> list[str]:
    """Each schedule field the checkpoint records that this config changes, ``FIELD: recorded OLD, now NEW``."""
    saved, now = recorded_schedule(common), {f"optim.{k}": v for k, v in schedule_of(cfg).items()}
    return stale_details({"config": saved}, {"config": {k: now[k] for k in saved}})


def _fixed(cfg: TrainConfig) -> dict[str, Any]:
    """CFG's values of the fields a resume cannot change (``section.field``)."""
    return {k: getattr(getattr(cfg, k.split(".")[0]), k.split(".")[1]) for k in RESUME_FIXED}


def stamp_of_run(run_dir: Path, saved: TrainConfig | None, common: dict[str, Any]) -> dict[str, Any]:
    """The stamp of the run a resume of RUN_DIR continues: its config.yaml (SAVED; None: gone), overlaid with what
    the checkpoint it loads records (COMMON), and its shards' content id as run_info.json records it."""
    config = _fixed(saved) if saved is not None else {}
    config |= {f"model.{k}": v for k, v in (common.get("model_shape") or {}).items()}
    loader = common.get("loader") or {}
    if "seed" in loader:
        config["data.seed"] = int(loader["seed"])
    if "scheduler" in common:
        config |= recorded_schedule(common)
    inputs = {"data": (recorded_inputs(run_dir) or {}).get("data")}
    if "num_sequences" in loader:
        inputs["sequences"] = int(loader["num_sequences"])
    return make_stamp(TRAINING, {k: v for k, v in inputs.items() if v is not None}, config)


def stamp_of_config(cfg: TrainConfig, manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The stamp of the run CFG asks for, on the shards its data.path holds (MANIFEST; None: none there yet)."""
    config = _fixed(cfg) | {f"optim.{k}": v for k, v in schedule_of(cfg).items()}
    inputs: dict[str, Any] = {}
    if manifest is not None:
        inputs["data"] = shards_id(cfg.data.path)
        listed = (manifest.get("splits", {}).get("train") or {}).get("sequences")
        if listed is not None:
            inputs["sequences"] = int(listed)
    return make_stamp(TRAINING, inputs, config)


def _comparable(old: dict[str, Any], new: dict[str, Any], strict: bool) -> None:
    """Keep in both stamps only the fields both hold, the schedule only when STRICT (see the module's docstring)."""
    for part in ("inputs", "config"):
        keys = [k for k in old[part] if k in new[part] and (strict or not k.startswith("optim."))]
        old[part] = {k: old[part][k] for k in keys}
        new[part] = {k: new[part][k] for k in keys}


def resume_refusal(cfg: TrainConfig, run: _Run, found: Path | str, common: dict[str, Any]) -> str | None:
    """Why CFG cannot resume RUN from the checkpoint FOUND (its common state COMMON), decided by the ledger, or
    None. Its first words are the field to change."""
    run_dir = run.run_dir
    old, new = stamp_of_run(run_dir, run.saved, common), stamp_of_config(cfg, run.manifest)
    _comparable(old, new, strict=cfg.optim.schedule_on_resume == "strict")
    try:
        decide("train", {"stamp": old}, new, run_dir)
    except OutputRefused as e:
        first, details = e.changes[0].split(":")[0], "; ".join(e.changes)
        field = first.partition(".")[2]
        if first.startswith("inputs."):
            return (
                f"data.path: {run_dir} trained on other shards than those {cfg.data.path} hold ({details}: another "
                "pack, or packed again in place); point data.path at the shards it trained on, or start another "
                "run_dir with init_from"
            )
        if field.startswith("optim."):
            return (
                f"{field}: checkpoint {found} was trained with another LR schedule ({details}); set it back, or say "
                "which schedule the resumed steps follow: optim.schedule_on_resume=config (this config's schedule "
                "from the checkpoint's step on; an extension's WSD decay moves to its new last steps) or "
                "=checkpoint (the checkpoint's schedule)"
            )
        return (
            f"{field}: checkpoint {found} holds a run with another value ({details}), which a resume cannot "
            "change; set it back, or train in another run_dir"
        )
    return None


def run_inputs(cfg: TrainConfig, run_dir: Path) -> dict[str, Any] | None:
    """The content ids of the inputs run_info.json records (midtrain.train.run_stamp): a fresh run's are those of
    its shards and init_from now; a resumed run keeps those its first start recorded (its weights descend from
    that init_from; check_resumable refused other shards), and one that recorded none (an older midtrain) stays
    unknown: None."""
    if ckpt.list_checkpoints(run_dir):
        return recorded_inputs(run_dir)
    return input_ids(cfg)


def check_resumable(cfg: TrainConfig, run_dir: Path) -> Path | None:
    """A run directory with checkpoints is resumed when :func:`resume_refusal` finds nothing against the checkpoint
    the resume loads (:func:`_resumed_checkpoint`) and that checkpoint holds shards of this tokenizer; without
    checkpoints, ``init_from``'s midtrain checkpoint must have this model's shape and tokenizer. Raises ConfigError
    naming the field, before anything is written.

    Returns the checkpoint the resume will load when this check has already verified its SHA-256s (the load
    then does not hash it again), else None."""
    manifest = None
    if (Path(cfg.data.path) / MANIFEST).is_file():
        manifest = load_manifest(cfg.data.path)
    if not ckpt.list_checkpoints(run_dir):
        found = None
        if cfg.init_from and not (Path(cfg.init_from) / "config.json").is_file():
            found = ckpt.latest_checkpoint(cfg.init_from)  # a midtrain checkpoint to take the weights of
        refused = _init_from_refusal(cfg, found, ckpt.read_common(found), manifest) if found else None
        if refused:
            raise ConfigError(refused)
        return None
    saved = read_run_config(run_dir / CONFIG) if (run_dir / CONFIG).exists() else None  # a cut one: ConfigError
    run = _Run(run_dir, saved, manifest)
    found, verified = _resumed_checkpoint(cfg, run)
    # none complete: config.yaml alone is compared, and the load names each checkpoint and why
    common = ckpt.read_common(found) if found is not None else {}
    refused = _refusal(cfg, run, found or run_dir, common)
    if refused:
        raise ConfigError(refused)
    return found if verified else None


def _refusal(cfg: TrainConfig, run: _Run, found: Path | str, common: dict[str, Any]) -> str | None:
    """Why CFG cannot resume RUN from the checkpoint FOUND: the shards' tokenizer first (it says more than their
    content id), then the ledger's decision."""
    return _tokenizer_refusal(cfg, found, common, run.manifest) or resume_refusal(cfg, run, found, common)


def _init_from_refusal(
    cfg: TrainConfig, found: Path, common: dict[str, Any], manifest: dict[str, Any] | None
) -> str | None:
    """Why CFG cannot take the weights of the checkpoint FOUND: another model shape, or shards of another
    tokenizer; None when it can."""
    shape = ckpt.shape_conflicts(common, cfg.model)
    if shape:
        return (
            f"{shape[0].split(':')[0]}: checkpoint {found} holds another model ({'; '.join(shape)}); "
            "init_from needs the same model shape"
        )
    return _tokenizer_refusal(cfg, found, common, manifest)


def _tokenizer_refusal(
    cfg: TrainConfig, found: Path | str, common: dict[str, Any], manifest: dict[str, Any] | None
) -> str | None:
    """Why the shards (their MANIFEST; None: not checked) are not of the tokenizer the checkpoint FOUND was
    trained with, or None."""
    mismatch = ckpt.tokenizer_conflict(common, manifest) if manifest is not None else None
    if mismatch:
        return (
            f"data.path: {mismatch}: token ids mean other text; pack {cfg.data.path} with the checkpoint's "
            f"tokenizer (checkpoint {found})"
        )
    return None


def _resumed_checkpoint(cfg: TrainConfig, run: _Run) -> tuple[Path | None, bool]:
    """The checkpoint a resume of RUN_DIR loads, for the pre-check: the newest whose files have their recorded
    sizes and SHA-256s, as ckpt.load_checkpoint picks it (a damaged newer one falls back to the one before, which
    may have been written under another schedule). Hashing a large checkpoint takes minutes and the load hashes
    it again, so the SHA-256s are read here only when the verdict depends on which one loads: when the
    size-complete checkpoints would not all get the same verdict. Otherwise the newest size-complete one stands for
    whichever loads (and none: None, the load says why). Every rank decides alike (the same files), so the
    collective hash runs on all or none. The second value: whether the SHA-256s were checked here."""
    run_dir = run.run_dir
    complete = [c for _, c in reversed(ckpt.list_checkpoints(run_dir)) if ckpt.size_problem(c) is None]
    if not complete:
        return None, False

    def verdict(found: Path) -> str | None:  # the refusal with the path left out: the same for the same record
        try:
            common = ckpt.read_common(found)
        except ckpt.CheckpointError as e:
            return f"unreadable: {e}"  # names the checkpoint: differs from every other, so the hash decides
        return _refusal(cfg, run, "<checkpoint>", common)

    if len({verdict(c) for c in complete}) == 1:
        return complete[0], False
    found = ckpt.latest_checkpoint(run_dir, check=ckpt.resume_problem)  # resume's own check: sizes, then SHA-256s
    return found, found is not None
