"""Whether an output is finished and still stands for what it claims: one vocabulary for every stage.

A stamp says what was made, from what content, with which settings::

    {"made": "proxy", "inputs": {"checkpoint": "<content id>", "shards": "<content id>"},
     "config": {...the settings...}, "notes": {...where things lay: recorded, never compared...}}

Every stage writes one beside what it made (the proxy, lm-eval and local-run results, the cluster SWE-bench run,
a tokenize cache and its unfinished run, a pack output's manifest, a prep output's prep.json; the ledger's
output.json, midtrain.formats.outputs, for the stages it decides for) and reuses or
resumes its output only when the stamp it would write now has the same ``made``, ``inputs`` and ``config``:
:func:`output_stamp` builds one, :func:`stamp` the one of a result made from a checkpoint;
:func:`stale_fields` names what differs (``inputs.checkpoint``, ``config.seq_length``) and the stage redoes,
refuses or starts over as its data demand. A path alone is never enough: a run directory names a newer
checkpoint after more training (iter_10's numbers were reported for iter_12), documents prepared again in place
are other documents.

Content: :func:`content_id` is what a checkpoint, export or data file holds, independent of where it lies; a
midtrain checkpoint's is built from the SHA-256s its ``complete.json`` records (formats.checkpoints.file_sha256,
the one hash of a checkpoint's files, written by the trainer and checked there), so scoring a
large checkpoint does not read it again; any other file is hashed whole, every byte (never a sample). Inputs
too large to read on every rerun (prep's input trees, pack's
document files) are identified by a :func:`digest` of their listing (names, sizes, mtimes or ETags, git HEAD).
The SFT probe's output.json and sft_result.json hold its stamp (midtrain.sft.run_stamp).

Checkpoints are found and checked by midtrain.formats.checkpoints.

Training runs: a run directory is reused (the demo, sweeps, the probe skip a training that already ran) only for
the settings and the input content it was trained with: :func:`training_stamp` of the config the trainer recorded
(RUN_DIR/config.yaml) and its inputs' content ids (RUN_DIR/run_info.json, :func:`training_inputs`) against those of
the config about to run; :func:`run_changes` names what differs, :func:`finished` is whether the
run is that training at its last step (midtrain.train.run_stamp builds both stamps from a TrainConfig).
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import midtrain
from midtrain.formats.checkpoints import latest_step, resolve_checkpoint
from midtrain.formats.rundir import CONFIG, MARKER, list_checkpoints

log = logging.getLogger(__name__)

NOTES = "notes"  # a stamp's key for what is recorded but never compared (paths given and resolved)


# -- content ----------------------------------------------------------------------------------------------------
def _file_digest(path: Path) -> str:
    """Every byte of PATH (never a sample: two files that differ anywhere differ here), read once per process
    for the same file (path, size, mtime, inode): a step that stamps an export twice reads it once."""
    st = path.stat()
    return _digest_of(str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


@lru_cache(maxsize=4096)
def _digest_of(path: str, size: int, mtime_ns: int, ino: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_version() -> dict[str, str | None]:
    """midtrain's version and, when it runs from a git checkout, the commit (None otherwise): a stamp of a
    result records the code that made it (a fixed scorer or oracle is another result)."""
    root = Path(midtrain.__file__).resolve().parents[1]
    commit: str | None = None
    if (root / ".git").exists():
        try:
            done = subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            )
            commit = (done.stdout.strip() or None) if done.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            commit = None
    return {"version": midtrain.__version__, "commit": commit}


def recorded_sha256(checkpoint: str | Path) -> dict[str, str]:
    """The per-file SHA-256s a checkpoint's complete.json records ({} without: written before checksums)."""
    try:
        return json.loads((Path(checkpoint) / MARKER).read_text()).get("sha256") or {}
    except (OSError, ValueError):
        return {}


def content_id(path: str | Path) -> str:
    """A digest of what a checkpoint, export or data file holds, independent of where it lies: a midtrain
    checkpoint's recorded per-file SHA-256s, else every file's relative name, size and bytes (hidden files aside)."""
    root = Path(path)
    h = hashlib.blake2b(digest_size=12)
    if root.is_file():
        h.update(f"{root.stat().st_size}\0{_file_digest(root)}".encode())
        return h.hexdigest()
    recorded = recorded_sha256(root)
    if recorded:
        for rel, sha in sorted(recorded.items()):
            h.update(f"{rel}\0sha256:{sha}\n".encode())
        return h.hexdigest()
    for f in sorted(
        p for p in root.rglob("*") if p.is_file() and not any(s.startswith(".") for s in p.relative_to(root).parts)
    ):
        rel = f.relative_to(root).as_posix()
        h.update(f"{rel}\0{f.stat().st_size}\0{_file_digest(f)}\n".encode())
    return h.hexdigest()


def digest(value: Any) -> str:
    """A short digest of a JSON value (a listing of files, a run's stamp): the same value, the same digest."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


# -- stamps -----------------------------------------------------------------------------------------------------
def output_stamp(
    made: str, inputs: Mapping[str, Any], config: Mapping[str, Any], notes: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What an output is: what was MADE, from which INPUTS (name -> content id, or a JSON description of the
    content), with which CONFIG (the settings); NOTES are recorded beside, never compared."""
    out: dict[str, Any] = {"made": made, "inputs": dict(inputs), "config": dict(config)}
    if notes:
        out[NOTES] = dict(notes)
    return out


def stale_fields(old: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    """Where an earlier stamp differs from the one that would be written now (empty: the output still stands):
    ``made``, ``inputs.NAME``, ``config.FIELD`` (and any other key of WANT but the notes)."""
    out: list[str] = []
    for key, value in want.items():
        if key == NOTES:
            continue
        before = old.get(key)
        if key in ("inputs", "config") and isinstance(value, Mapping) and isinstance(before, Mapping):
            out += [f"{key}.{k}" for k in sorted(set(value) | set(before)) if before.get(k) != value.get(k)]
        elif before != value:
            out.append(key)
    return out


_MISSING = "(none)"  # what a stamp that lacks a field shows for it


def _field(stamp: Mapping[str, Any], name: str) -> Any:
    """The value a :func:`stale_fields` name stands for in STAMP (``config.FIELD``: STAMP["config"]["FIELD"])."""
    key, _, sub = name.partition(".")
    value = stamp.get(key, _MISSING)
    if sub and isinstance(value, Mapping):
        return value.get(sub, _MISSING)
    return value


def stale_details(old: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    """:func:`stale_fields` with the values, for the message that names them: ``FIELD: recorded OLD, now NEW``."""

    def show(value: Any) -> str:
        return value if value is _MISSING else repr(value)

    return [
        f"{name}: recorded {show(_field(old, name))}, now {show(_field(want, name))}"
        for name in stale_fields(old, want)
    ]


def read_stamp(path: str | Path) -> dict[str, Any] | None:
    """The JSON object at PATH (a local path, or an object-store one: midtrain.locations), None when it is missing
    or unreadable (a kill mid-write: the output is redone)."""
    try:
        data = json.loads((Path(path) if isinstance(path, str) else path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stamp(checkpoint: str | Path, config: dict[str, Any], made: str = "scores", **inputs: Any) -> dict[str, Any]:
    """The :func:`output_stamp` of a result made from CHECKPOINT (a run directory: its newest complete
    checkpoint): its content and that of each other input named (data, tokenizer; None is recorded as None),
    and CONFIG. The path given and the checkpoint it resolved to are notes: the same content elsewhere is the
    same result."""
    scored = resolve_checkpoint(checkpoint)
    contents: dict[str, str | None] = {"checkpoint": content_id(scored)}
    contents |= {name: None if p is None else content_id(p) for name, p in inputs.items()}
    notes = {"checkpoint": str(checkpoint), "scored_checkpoint": str(scored)}
    return {**output_stamp(made, contents, config, notes), "code": code_version()}


# -- training runs ----------------------------------------------------------------------------------------------
# Fields of a training config recorded in its stamp's notes, never compared: they do not change what is trained.
# - name, run_dir: what the run is called and where it lies (the run directory is where the caller looks);
# - log.*: what is reported, how often and where (console interval, TensorBoard, W&B, the MFU's peak);
# - checkpoint.*: when and how checkpoints are written and how many are kept; a resume is bitwise exact, so where
#   the saves fell does not change the weights (a run whose last step was not saved is not finished anyway);
# - the layout of the same computation over devices and kernels (tensor/pipeline/context/expert/data parallel
#   sizes, sequence parallelism, recompute, the transformer implementation and attention kernel): they change
#   rounding, not the run; checkpoints hold global tensors and load at any layout. The distributed optimizer is
#   compared: a resume cannot change it (train.config.RESUME_FIXED), so another value is another run;
# - optim.schedule_on_resume: how a resume treats a changed schedule; the schedule the steps followed is compared
#   (config.yaml records it: with =checkpoint, the checkpoint's).
# The paths of the run's inputs (data.path, init_from) ARE compared, and so is their content: the trainer records
# in RUN_DIR/run_info.json the content ids (:func:`training_inputs`) of the shards it read and of the checkpoint
# init_from named, so shards packed again in place, or an init_from checkpoint replaced at the same path, are
# another training (``inputs.data``, ``inputs.init_from``).
TRAINING_NOTES = (
    "name",
    "run_dir",
    "log.",
    "checkpoint.",
    "parallel.tensor",
    "parallel.pipeline",
    "parallel.context",
    "parallel.data",
    "parallel.expert",
    "parallel.expert_tensor",
    "parallel.sequence_parallel",
    "parallel.recompute",
    "precision.transformer_impl",
    "precision.portable_attention",
    "optim.schedule_on_resume",
)
TRAINING = "training run"  # a training run's stamp's ``made``


def _dotted(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            out |= _dotted(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


RUN_INFO = "run_info.json"  # what a training run records beside config.yaml: its inputs' content ids among them
SHARDS_MANIFEST = "manifest.json"  # a pack output's manifest (formats.shard_reader.MANIFEST; that module loads torch)
NOT_FOUND = "(not found)"  # the content id of an input that is not there (the training would fail on it)


def shards_id(data_path: str | Path) -> str:
    """The content id of the packed shards at DATA_PATH, from their manifest alone (never the shards' bytes): the
    digest of the pack stamp it records (the documents' fingerprints, the tokenizer and the pack settings: the
    same stamp, the same shards); for a manifest without one (a pack before stamps, shards written otherwise),
    the digest of the manifest and of the directory's listing (names, sizes, mtimes: shards written again are
    other shards); :data:`NOT_FOUND` without a manifest."""
    root = Path(data_path)
    manifest = read_stamp(root / SHARDS_MANIFEST)
    if manifest is None:
        return NOT_FOUND
    if isinstance(manifest.get("stamp"), dict):
        return "pack:" + digest(manifest["stamp"])
    listing = [
        [p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns]
        for p in sorted(root.rglob("*"))
        if p.is_file()
    ]
    return "listing:" + digest([manifest, listing])


def weights_id(init_from: str | Path | None) -> str | None:
    """The content id of the weights INIT_FROM names (None: none): a midtrain checkpoint's, the newest complete one
    of a run directory (the one init_from loads), from the SHA-256s its complete.json records; an HF directory's
    from its files (:func:`content_id`); :data:`NOT_FOUND` when it holds neither."""
    if init_from is None or str(init_from) == "":
        return None
    try:
        return content_id(resolve_checkpoint(init_from))
    except (FileNotFoundError, OSError):
        return NOT_FOUND


def training_inputs(data_path: str | Path, init_from: str | Path | None) -> dict[str, str | None]:
    """The content ids of a training's inputs, as run_info.json records them and :func:`training_stamp` compares
    them: ``data`` (:func:`shards_id`) and ``init_from`` (:func:`weights_id`). Cheap: two small files read."""
    return {"data": shards_id(data_path), "init_from": weights_id(init_from)}


def training_stamp(config: Mapping[str, Any], inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The :func:`output_stamp` of a training run from its resolved config (the nested mapping config.yaml holds):
    every field in dotted form (``optim.lr``) in ``config``, those of :data:`TRAINING_NOTES` in the notes; INPUTS
    are its inputs' content ids (:func:`training_inputs`; None: not recorded, an older run_info.json)."""
    flat = _dotted(config)
    sections = tuple(n for n in TRAINING_NOTES if n.endswith("."))
    notes = {k: v for k, v in flat.items() if k in TRAINING_NOTES or k.startswith(sections)}
    return output_stamp(TRAINING, dict(inputs or {}), {k: v for k, v in flat.items() if k not in notes}, notes)


def run_changes(run_dir: str | Path, want: Mapping[str, Any], recorded: Mapping[str, Any] | None) -> list[str]:
    """Why RUN_DIR's training is not the one WANT (the :func:`training_stamp` of the config about to run) asks
    for, as ``FIELD: recorded OLD, now NEW`` (:func:`stale_details`): [] when it holds no checkpoint (nothing to
    reuse or resume) or a run of the same settings and inputs. RECORDED is the stamp of its config.yaml with the
    inputs its run_info.json records, None when config.yaml is missing or cut: a run of unknown settings, never
    reused; an input WANT names that RECORDED lacks is unknown too (``inputs.data: ... records no content id``)."""
    if not list_checkpoints(run_dir):
        return []
    if recorded is None:
        return [f"{CONFIG}: missing or cut in {run_dir} (the settings it trained with are unknown)"]
    # an input whose content id the run did not record is never taken as the same: the path may hold other
    # shards or weights by now (a run_info.json of an older midtrain, or none)
    unknown = [f"inputs.{name}" for name in want.get("inputs") or {} if name not in (recorded.get("inputs") or {})]
    return [
        f"{name}: {run_dir}/{RUN_INFO} records no content id of it (written by an older midtrain, or missing): "
        "what it trained on is unknown"
        for name in unknown
    ] + [d for d in stale_details(recorded, want) if d.split(":")[0] not in unknown]


def reached_step(
    run_dir: str | Path, step: int, want: Mapping[str, Any] | None = None, recorded: Mapping[str, Any] | None = None
) -> bool:
    """Whether RUN_DIR holds a finished training: its newest complete checkpoint is the one of ``step`` (the last
    step: nothing to train) and, given WANT (the :func:`training_stamp` of the config about to run), it trained
    with those settings on inputs of the same content (RECORDED, the stamp of its config.yaml and of the inputs its
    run_info.json records, has no :func:`run_changes`; a difference is logged). Every caller that skips a training
    passes WANT (midtrain.train.run_stamp); the step alone is what a reader of the layout asks."""
    changes = run_changes(run_dir, want, recorded) if want is not None else []
    if changes:
        log.info("%s is not the training asked for (%s); not reused", run_dir, "; ".join(changes))
        return False
    return latest_step(run_dir) == step
