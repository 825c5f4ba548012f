"""The resume pre-check: whether RUN_DIR holds a run this config may resume (or extend), decided before anything
is written and before the model is built, on every rank alike; and what run_info.json records of its inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from midtrain.config import ConfigError
from midtrain.formats.rundir import CONFIG
from midtrain.formats.shard_reader import MANIFEST
from midtrain.formats.stamp import shards_id
from midtrain.train import checkpoint as ckpt
from midtrain.train.config import SCHEDULE_FIELDS, TrainConfig, read_run_config, resume_conflicts
from midtrain.train.run_stamp import input_ids, recorded_inputs


def schedule_of(cfg: TrainConfig) -> dict[str, Any]:
    """The LR/WD schedule a checkpoint records: the SCHEDULE_FIELDS of the optimizer config."""
    return {k: getattr(cfg.optim, k) for k in SCHEDULE_FIELDS}


def schedule_conflicts(common: dict[str, Any], cfg: TrainConfig) -> list[str]:
    """'optim.FIELD: checkpoint -> this config' for each schedule field that differs. Checkpoints from before
    the schedule was recorded are compared on what megatron's scheduler state holds."""
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
    now = schedule_of(cfg)
    return [
        f"optim.{k}: {saved[k]!r} -> {now[k]!r}"
        for k in SCHEDULE_FIELDS
        if saved.get(k) is not None and saved[k] != now[k]
    ]


def run_inputs(cfg: TrainConfig, run_dir: Path) -> dict[str, Any] | None:
    """The content ids of the inputs run_info.json records (midtrain.train.run_stamp): a fresh run's are those of
    its shards and init_from now; a resumed run keeps those its first start recorded (its weights descend from
    that init_from; check_resumable refused other shards), and one that recorded none (an older midtrain) stays
    unknown: None."""
    if ckpt.list_checkpoints(run_dir):
        return recorded_inputs(run_dir)
    return input_ids(cfg)


def check_resumable(cfg: TrainConfig, run_dir: Path) -> Path | None:
    """A run directory with checkpoints is resumed: its config.yaml must be whole and agree with ``cfg`` on
    every field a resume cannot change (train.config.RESUME_FIXED), its shards must be the ones it trained on
    (the content id run_info.json records), and the checkpoint the resume loads
    (:func:`_resumed_checkpoint`) must have been written for this model shape (recorded in the checkpoint:
    config.yaml may be gone), with this LR schedule (unless optim.schedule_on_resume says which one wins), on
    shards of this tokenizer and at a data position these shards and seed have. Raises ConfigError naming the
    fields, before anything is written. Without checkpoints, ``init_from``'s midtrain checkpoint is checked for
    shape and tokenizer the same way.

    Returns the checkpoint the resume will load when this check has already verified its SHA-256s (the load
    then does not hash it again), else None."""
    saved_path = run_dir / CONFIG
    resuming = bool(ckpt.list_checkpoints(run_dir))
    if resuming and saved_path.exists():
        conflicts = resume_conflicts(read_run_config(saved_path), cfg)
        if conflicts:
            raise ConfigError(
                f"{conflicts[0].split(':')[0]}: {run_dir} holds checkpoints of a run with another "
                f"value ({'; '.join(conflicts)}), which a resume cannot change; set it back, or "
                "train in another run_dir"
            )
    manifest = None
    if (Path(cfg.data.path) / MANIFEST).is_file():
        from midtrain.formats.shard_reader import load_manifest

        manifest = load_manifest(cfg.data.path)
    verified = False
    if resuming:
        found, verified = _resumed_checkpoint(cfg, run_dir, manifest)
    elif cfg.init_from and not (Path(cfg.init_from) / "config.json").is_file():
        found = ckpt.latest_checkpoint(cfg.init_from)  # a midtrain checkpoint to take the weights of
    else:
        found = None
    if found is None:  # nothing complete to resume: the load names each checkpoint and why (or starts fresh)
        return None
    refused = _refusal(cfg, found, ckpt.read_common(found), resuming, manifest)
    if refused:
        raise ConfigError(refused)
    if resuming and manifest is not None:  # after the tokenizer and data position, which say more when they differ
        _check_same_shards(cfg, run_dir)
    return found if verified else None


def _check_same_shards(cfg: TrainConfig, run_dir: Path) -> None:
    """Refuse to resume RUN_DIR on shards other than those it trained on: the content id its run_info.json
    records (none recorded, an older midtrain: only the data position is checked, by :func:`_loader_refusal`)."""
    before = (recorded_inputs(run_dir) or {}).get("data")
    now = shards_id(cfg.data.path)
    if before is not None and before != now:
        raise ConfigError(
            f"data.path: {run_dir} trained on other shards than those {cfg.data.path} holds (inputs.data: "
            f"recorded {before!r}, now {now!r}: another pack, or packed again in place); point data.path at the "
            "shards it trained on, or start another run_dir with init_from"
        )


def _resumed_checkpoint(cfg: TrainConfig, run_dir: Path, manifest: dict[str, Any] | None) -> tuple[Path | None, bool]:
    """The checkpoint a resume of RUN_DIR loads, for the pre-check: the newest whose files have their recorded
    sizes and SHA-256s, as ckpt.load_checkpoint picks it (a damaged newer one falls back to the one before, which
    may have been written under another schedule). Hashing a large checkpoint takes minutes and the load hashes
    it again, so the SHA-256s are read here only when the verdict depends on which one loads: when the
    size-complete checkpoints would not all get the same verdict. Otherwise the newest size-complete one stands for
    whichever loads (and none: None, the load says why). Every rank decides alike (the same files), so the
    collective hash runs on all or none. The second value: whether the SHA-256s were checked here."""
    complete = [c for _, c in reversed(ckpt.list_checkpoints(run_dir)) if ckpt.size_problem(c) is None]
    if not complete:
        return None, False

    def verdict(found: Path) -> str | None:  # the refusal with the path left out: the same for the same record
        try:
            common = ckpt.read_common(found)
        except ckpt.CheckpointError as e:
            return f"unreadable: {e}"  # names the checkpoint: differs from every other, so the hash decides
        return _refusal(cfg, Path("<checkpoint>"), common, True, manifest)

    if len({verdict(c) for c in complete}) == 1:
        return complete[0], False
    found = ckpt.latest_checkpoint(run_dir, check=ckpt.resume_problem)  # resume's own check: sizes, then SHA-256s
    return found, found is not None


def _refusal(
    cfg: TrainConfig, found: Path, common: dict[str, Any], resuming: bool, manifest: dict[str, Any] | None
) -> str | None:
    """Why CFG cannot resume from (RESUMING) or take the weights of the checkpoint FOUND, whose common state is
    COMMON (its model shape, tokenizer, data position and schedule), against the shards' MANIFEST (None: not
    checked); None when it can."""
    shape = ckpt.shape_conflicts(common, cfg.model)
    if shape:
        return f"{shape[0].split(':')[0]}: checkpoint {found} holds another model ({'; '.join(shape)}); " + (
            "set it back, or train in another run_dir" if resuming else "init_from needs the same model shape"
        )
    if manifest is not None:
        mismatch = ckpt.tokenizer_conflict(common, manifest)
        if mismatch:
            return (
                f"data.path: {mismatch}: token ids mean other text; pack {cfg.data.path} with the "
                f"checkpoint's tokenizer (checkpoint {found})"
            )
        if resuming:
            moved = _loader_refusal(cfg, common.get("loader") or {}, manifest, found)
            if moved:
                return moved
    if resuming and "scheduler" in common and cfg.optim.schedule_on_resume == "strict":
        changed = schedule_conflicts(common, cfg)
        if changed:
            return (
                f"{changed[0].split(':')[0]}: checkpoint {found} was trained with another LR schedule "
                f"({'; '.join(changed)}); set it back, or say which schedule the resumed steps follow: "
                "optim.schedule_on_resume=config (this config's schedule from the checkpoint's step on; an "
                "extension's WSD decay moves to its new last steps) or =checkpoint (the checkpoint's schedule)"
            )
    return None


def _loader_refusal(cfg: TrainConfig, state: dict[str, Any], manifest: dict[str, Any], found: Path) -> str | None:
    """Why the checkpoint's data position does not fit these shards and seed (the sample order would change), or
    None: checked once before the model is built, not as an error on every rank after it has loaded."""
    listed = (manifest.get("splits", {}).get("train") or {}).get("sequences")
    if "seed" in state and int(state["seed"]) != cfg.data.seed:
        return (
            f"data.seed: checkpoint {found} walked the shards in the order of seed {state['seed']}, "
            f"this config has {cfg.data.seed}; set it back, or train in another run_dir"
        )
    if listed is not None and "num_sequences" in state and int(state["num_sequences"]) != int(listed):
        return (
            f"data.path: checkpoint {found} trained on {state['num_sequences']} packed sequences, "
            f"{cfg.data.path} holds {listed}: the shards changed since; point data.path at the "
            "shards it trained on, or start another run_dir with init_from"
        )
    return None
