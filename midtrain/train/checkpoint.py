"""Checkpoints: megatron-core dist_checkpointing, atomic, verified, keep-last-N, newest-valid resume.

Layout: ``RUN_DIR/checkpoints/iter_0000020/`` holds the dist_checkpointing files (model, optimizer),
the common state (step, scheduler, data-loader position) and per-rank RNG states, plus ``complete.json``
listing every file with its size. A checkpoint is written into ``iter_0000020.tmp/``, the marker is
written last, then the directory is renamed into place: a directory named ``iter_*`` with a marker whose
file list matches the disk is complete; anything else is ignored (and reported) on resume.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# The checkpoint index (names, completeness, newest valid) is part of the run-directory format; importers of
# this module get it here too.
from midtrain.formats.rundir import CHECKPOINTS, MARKER, checkpoint_name, latest_checkpoint, list_checkpoints, \
    valid_checkpoints, verify

log = logging.getLogger(__name__)

# The distributed optimizer's state layout in a checkpoint: one tensor per contiguous buffer shard, saved
# and loaded by every rank in parallel, reshardable over data parallelism (megatron's own default). Its
# built-in default ("fully_sharded_model_space") is deprecated and fails to save in megatron-core 0.16
# ("ShardedTensor.flattened_range is not supported"). Other optimizers ignore the key.
OPTIMIZER_METADATA = {"distrib_optim_sharding_type": "dp_reshardable"}


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _rng_state() -> dict[str, Any]:
    from megatron.core import tensor_parallel

    state = {"cpu": torch.get_rng_state(), "tracker": tensor_parallel.get_cuda_rng_tracker().get_states()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    from megatron.core import tensor_parallel

    torch.set_rng_state(state["cpu"])
    tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _sharded_state(model: torch.nn.Module, optimizer: Any | None, common: dict[str, Any],
                   is_loading: bool) -> dict[str, Any]:
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    world = dist.get_world_size() if dist.is_initialized() else 1
    model_sd = unwrap(model).sharded_state_dict()
    state: dict[str, Any] = {"model": model_sd, **common}
    if optimizer is not None:
        state["optimizer"] = optimizer.sharded_state_dict(model_sd, is_loading=is_loading, metadata=OPTIMIZER_METADATA)
    state["rng"] = ShardedObject("rng_state", None if is_loading else _rng_state(), (world,), (_rank(),),
                                 replica_id=0)
    return state


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The GPTModel inside DDP / Float16Module wrappers."""
    while hasattr(model, "module"):
        model = model.module
    return model


def shield_checkpoint_helper() -> None:
    """Start megatron-core's checkpoint-writer helper process now, with SIGTERM/SIGUSR1 ignored in it.

    dist_checkpointing reports write results through a multiprocessing Manager started at the first save. A
    job-wide SIGTERM/SIGUSR1 (Slurm preemption, `scancel --signal`) reaches that helper too, and without a
    handler it dies, so the very save the signal asks for fails (EOFError/BrokenPipe). Started while the
    signals are ignored, it keeps ignoring them (SIG_IGN survives exec). Call before installing handlers.
    """
    try:
        from megatron.core.dist_checkpointing.strategies import filesystem_async
    except ImportError:
        return
    start = getattr(filesystem_async, "_get_write_results_queue", None)  # absent in other versions: nothing to do
    if start is None:
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        start()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def save_checkpoint(run_dir: str | Path, step: int, model: torch.nn.Module, optimizer: Any,
                    common: dict[str, Any], keep_last: int, async_queue: Any = None) -> Path:
    """Save atomically to RUN_DIR/checkpoints/iter_<step>; keep the newest ``keep_last``. Collective.

    With ``async_queue`` (megatron's ``AsyncCallsQueue``) the tensors are staged and written by a background
    process; the marker and the rename happen when the queue finalizes the save (``finish_async_saves``),
    so until then the checkpoint is an ignored ``.tmp`` directory.
    """
    from megatron.core import dist_checkpointing

    root = Path(run_dir) / CHECKPOINTS
    final = root / checkpoint_name(step)
    tmp = root / (final.name + ".tmp")
    t0 = time.time()
    if _rank() == 0:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    _barrier()
    state = _sharded_state(model, optimizer, {"common": common}, is_loading=False)
    if async_queue is None:
        dist_checkpointing.save(state, str(tmp))
        _complete(run_dir, tmp, final, step, keep_last, t0)
        return final
    request = dist_checkpointing.save(state, str(tmp), async_sharded_save=True)
    request.finalize_fns.append(lambda: _complete(run_dir, tmp, final, step, keep_last, t0))
    async_queue.schedule_async_request(request)
    if _rank() == 0:
        log.info("checkpoint %s: writing in the background", final.name)
    return final


def _complete(run_dir: str | Path, tmp: Path, final: Path, step: int, keep_last: int, t0: float) -> None:
    """All ranks have written ``tmp``: write the marker, rename into place, prune. Collective."""
    _barrier()
    if _rank() == 0:
        files = {str(f.relative_to(tmp)): f.stat().st_size for f in sorted(tmp.rglob("*")) if f.is_file()}
        (tmp / MARKER).write_text(json.dumps({"step": step, "time": time.time(), "files": files}, indent=1))
        if final.exists():  # a rerun of the same step (e.g. after a crash past the rename)
            shutil.rmtree(final)
        tmp.rename(final)
        _prune(run_dir, keep_last)
        log.info("saved checkpoint %s in %.1fs", final, time.time() - t0)
    _barrier()


def async_queue() -> Any:
    """A queue for background checkpoint writes (megatron-core's AsyncCallsQueue)."""
    from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

    return AsyncCallsQueue()


def finish_async_saves(queue: Any, blocking: bool) -> None:
    """Complete the background saves that are done (all of them with ``blocking``). Collective."""
    if queue is not None:
        queue.maybe_finalize_async_calls(blocking=blocking)


def _prune(run_dir: str | Path, keep_last: int) -> None:
    complete = [(s, p) for s, p in list_checkpoints(run_dir) if (p / MARKER).is_file()]
    for _, path in complete[:-keep_last]:
        shutil.rmtree(path, ignore_errors=True)
    for stale in (Path(run_dir) / CHECKPOINTS).glob("iter_*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)


def _all_ok(ok: bool) -> bool:
    if not dist.is_initialized():
        return ok
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"  # NCCL
    flag = torch.tensor([0 if ok else 1], dtype=torch.int64, device=device)
    dist.all_reduce(flag)
    return int(flag.item()) == 0


def load_checkpoint(run_dir: str | Path, model: torch.nn.Module, optimizer: Any) -> tuple[Path, dict] | None:
    """Restore model, optimizer and RNG from the newest loadable checkpoint; returns (path, common state).

    A checkpoint that fails to load on any rank is reported and the previous one is tried. None = fresh start.
    """
    from megatron.core import dist_checkpointing
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception

    for step, path in valid_checkpoints(run_dir):
        try:
            common = dist_checkpointing.load_common_state_dict(str(path)).get("common", {})
            if optimizer is not None and "scheduler" not in common:
                # A weights-only checkpoint (step-0 initial weights, an HF conversion): start from its
                # weights with a fresh optimizer, schedule and data position.
                load_weights(path, model)
                return path, {"step": 0, "weights_only": True}
            loaded = dist_checkpointing.load(_sharded_state(model, optimizer, {}, is_loading=True), str(path))
            ok = True
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - any failure: use the previous one
            log.warning("checkpoint %s failed to load (%s: %s); trying an older one", path, type(e).__name__, e)
            ok = False
        if not _all_ok(ok):
            continue
        unwrap(model).load_state_dict(loaded["model"])
        if optimizer is not None:
            optimizer.load_state_dict(loaded["optimizer"])
        _set_rng_state(loaded["rng"])
        log.info("resumed from %s (step %d)", path, step)
        return path, loaded["common"]
    return None


def load_weights(path: str | Path, model: torch.nn.Module) -> Path:
    """``init_from`` for midtrain checkpoints: model weights only. ``path`` = a run dir or a checkpoint dir."""
    from megatron.core import dist_checkpointing

    ckpt = latest_checkpoint(path)
    if ckpt is None:
        raise FileNotFoundError(f"init_from: no complete midtrain checkpoint in {path}")
    sharded = {"model": unwrap(model).sharded_state_dict()}
    loaded = dist_checkpointing.load(sharded, str(ckpt))
    unwrap(model).load_state_dict(loaded["model"])
    log.info("initialised weights from %s", ckpt)
    return ckpt
