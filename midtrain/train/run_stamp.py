"""Whether a run directory holds the training a config asks for, for the callers that skip a training that
already ran (the demo, sweeps, the SFT probe): the resolved config the trainer recorded in RUN_DIR/config.yaml,
and the content ids of its inputs in RUN_DIR/run_info.json (shards packed again in place, an init_from checkpoint
replaced at its path: another training), against the config about to run and its inputs now, both as
:func:`midtrain.formats.stamp.training_stamp` and compared by ``stale_fields`` (the fields that do not change
what is trained are notes: stamp.TRAINING_NOTES).

A run of other settings is never reused, and never resumed either (its checkpoints would carry the old run on
under the new settings): :func:`reuse_or_clear` starts it over in a clean directory (the demo and the probe);
a sweep refuses it instead (midtrain.sweep.plan.check_stamp), as it refuses a changed variant.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from midtrain.config import ConfigError
from midtrain.formats import stamp
from midtrain.formats.rundir import CONFIG
from midtrain.train.config import TrainConfig, read_run_config

log = logging.getLogger(__name__)


def input_ids(cfg: TrainConfig) -> dict[str, str | None]:
    """The content ids of CFG's inputs as the trainer records them in run_info.json (stamp.training_inputs: the
    shards' manifest stamp, init_from's recorded SHA-256s; nothing large is read)."""
    return stamp.training_inputs(cfg.data.path, cfg.init_from)


def want_stamp(cfg: TrainConfig) -> dict[str, Any]:
    """The stamp of the training CFG describes, its values as config.yaml holds them (written and read back: a
    Path, a tuple or an int given for a float compare as the trainer records them), with its inputs' content ids."""
    return stamp.training_stamp(TrainConfig.from_yaml(cfg.to_yaml()).to_dict(), input_ids(cfg))


def recorded_inputs(run_dir: str | Path) -> dict[str, Any] | None:
    """The inputs' content ids RUN_DIR/run_info.json records, None when it records none (missing, cut, or written
    by an older midtrain): unknown, never taken as the same."""
    info = stamp.read_stamp(Path(run_dir) / stamp.RUN_INFO)
    inputs = (info or {}).get("inputs")
    return dict(inputs) if isinstance(inputs, dict) else None


def recorded_stamp(run_dir: str | Path) -> dict[str, Any] | None:
    """The stamp of the training RUN_DIR/config.yaml records (read as the trainer reads it: fields added to midtrain
    since take their defaults) with the inputs run_info.json records, None when config.yaml is missing, empty or
    cut."""
    try:
        config = read_run_config(Path(run_dir) / CONFIG).to_dict()
    except (OSError, ConfigError):
        return None
    return stamp.training_stamp(config, recorded_inputs(run_dir))


def run_changes(run_dir: str | Path, cfg: TrainConfig) -> list[str]:
    """What RUN_DIR's training differs in from CFG (``config.FIELD: recorded OLD, now NEW``); [] when it holds no
    checkpoint or one of CFG's training."""
    return stamp.run_changes(run_dir, want_stamp(cfg), recorded_stamp(run_dir))


def finished(run_dir: str | Path, cfg: TrainConfig) -> bool:
    """Whether RUN_DIR holds CFG's training at its last step (nothing to train)."""
    return stamp.reached_step(run_dir, cfg.optim.train_steps, want_stamp(cfg), recorded_stamp(run_dir))


def reuse_or_clear(run_dir: str | Path, cfg: TrainConfig, what: str) -> bool:
    """True when RUN_DIR holds CFG's training, finished (the caller skips it); a run directory of another training
    is removed first, named with what differs in a log line (WHAT: the caller), so the training starts over
    instead of resuming the old run's checkpoints; an unfinished run of the same settings is left to resume."""
    run_dir = Path(run_dir)
    want, recorded = want_stamp(cfg), recorded_stamp(run_dir)
    changes = stamp.run_changes(run_dir, want, recorded)
    if changes:
        log.warning("%s: %s holds another training (%s); trained again from scratch", what, run_dir, "; ".join(changes))
        shutil.rmtree(run_dir)
        return False
    return stamp.reached_step(run_dir, cfg.optim.train_steps, want, recorded)
