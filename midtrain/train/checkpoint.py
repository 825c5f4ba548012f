"""Checkpoints: megatron-core dist_checkpointing, atomic, verified, keep-last-N, newest-valid resume.

Layout: ``RUN_DIR/checkpoints/iter_0000020/`` holds the dist_checkpointing files (model, optimizer),
the common state (step, scheduler, data-loader position, parallel layout) and the RNG states, plus
``complete.json`` listing every file with its size and SHA-256. A checkpoint is written into
``iter_0000020.tmp/``, the marker is written last, then the directory is renamed into place: a directory
named ``iter_*`` with a marker whose file list (sizes, and checksums when loading) matches the disk is
complete. A damaged newest checkpoint is reported and the previous complete one is used; a run directory
whose checkpoints are all damaged, or whose complete checkpoint fails to load, stops the run with a
:class:`CheckpointError` naming it and why (never a silent restart from step 0).

The RNG states are saved as megatron's own training loop saves them: one object per (pipeline, tensor)
rank, replicated over the data- and context-parallel ranks, so a resume on another number of GPUs (another
data-parallel size) loads them; after a change of TP/PP they are not loadable and are reset from the seed
(as megatron does), which changes nothing without dropout.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import shutil
import signal
import time
from multiprocessing.managers import SyncManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

# The checkpoint index (names, completeness, newest complete) is part of the run-directory format
# (formats.rundir, formats.checkpoints); importers of this module get it here too.
from midtrain.formats.checkpoints import CheckpointError, checksum_problem, file_sha256, latest_checkpoint, size_problem
from midtrain.formats.outputs import Fence, OutputRefused, die_with_parent
from midtrain.formats.rundir import CHECKPOINTS, MARKER, checkpoint_name, list_checkpoints
from midtrain.locations import fsync_dir, write_text_atomic
from midtrain.train.config import RESUME_FIXED

if TYPE_CHECKING:
    from megatron.core.models.gpt import GPTModel

    from midtrain.train.model_config import ModelConfig

log = logging.getLogger(__name__)

# The distributed optimizer's state layout in a checkpoint: one tensor per contiguous buffer shard, saved
# and loaded by every rank in parallel, reshardable over data parallelism (megatron's own default). Its
# built-in default ("fully_sharded_model_space") is deprecated and fails to save in megatron-core 0.16
# ("ShardedTensor.flattened_range is not supported"). Other optimizers ignore the key.
OPTIMIZER_METADATA = {"distrib_optim_sharding_type": "dp_reshardable"}
RNG_KEY = "rng_state"
EXTRA_STATE = "_extra_state"  # Transformer Engine modules' extra state (FP8 scaling; empty without FP8)


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


def layout() -> dict[str, int]:
    """This process group's parallel layout, as recorded in a checkpoint's common state."""
    from megatron.core import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        return {"tensor": 1, "pipeline": 1, "context": 1, "data": 1}
    return {
        "tensor": ps.get_tensor_model_parallel_world_size(),
        "pipeline": ps.get_pipeline_model_parallel_world_size(),
        "context": ps.get_context_parallel_world_size(),
        "data": ps.get_data_parallel_world_size(),
    }


def _rng_object(is_loading: bool) -> Any:
    """The RNG states as megatron's training loop checkpoints them (``get_rng_state``): sharded by (pipeline,
    tensor) rank, replicated over data x context parallel ranks (replica 0 writes). Its key depends on TP and PP
    only, so it loads at any data-parallel size."""
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    if ps.model_parallel_is_initialized():
        pp, tp = ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()
        pp_size, tp_size = ps.get_pipeline_model_parallel_world_size(), ps.get_tensor_model_parallel_world_size()
        replica = ps.get_data_parallel_rank(with_context_parallel=True)
    else:
        pp, tp, pp_size, tp_size, replica = 0, 0, 1, 1, 0
    return ShardedObject(
        RNG_KEY, None if is_loading else [_rng_state()], (pp_size, tp_size), (pp, tp), replica_id=replica
    )


def _sharded_state(
    model: torch.nn.Module, optimizer: Any | None, common: dict[str, Any], is_loading: bool, with_rng: bool = True
) -> dict[str, Any]:
    model_sd = unwrap(model).sharded_state_dict()
    state: dict[str, Any] = {"model": model_sd, **common}
    if optimizer is not None:
        state["optimizer"] = optimizer.sharded_state_dict(model_sd, is_loading=is_loading, metadata=OPTIMIZER_METADATA)
    if with_rng:
        state["rng"] = _rng_object(is_loading)
    return state


def unwrap(model: torch.nn.Module) -> GPTModel:
    """The GPTModel inside DDP / Float16Module wrappers."""
    while hasattr(model, "module"):
        model = model.module  # type: ignore[assignment]  # torch types Module.__getattr__ as Tensor | Module
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
        if getattr(filesystem_async, "_results_queue", False) is None:
            # megatron's own start (a spawned Manager's Queue), its server dying with this process: ignoring
            # SIGTERM, it outlived a kill -9 of the trainer (on a GPU node holding what the requeue needs)
            manager = SyncManager(ctx=multiprocessing.get_context("spawn"))
            manager.start(initializer=die_with_parent)
            filesystem_async._results_queue = manager.Queue()  # the proxy keeps the manager alive
        start()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: Any,
    common: dict[str, Any],
    keep_last: int,
    async_queue: Any = None,
    fence: Fence | None = None,
) -> Path:
    """Save atomically to RUN_DIR/checkpoints/iter_<step>; keep the newest ``keep_last``. Collective.

    With ``async_queue`` (megatron's ``AsyncCallsQueue``) the tensors are staged and written by a background
    process; the marker and the rename happen when the queue finalizes the save (``finish_async_saves``),
    so until then the checkpoint is an ignored ``.tmp`` directory. With FENCE (the run directory's lease,
    formats.outputs) the rename happens only while this run still holds it.
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
    state = _sharded_state(model, optimizer, {"common": {**common, "layout": layout()}}, is_loading=False)
    if async_queue is None:
        try:
            dist_checkpointing.save(state, str(tmp))
        except (Exception, _checkpoint_exception()) as e:
            raise write_error(e, tmp) from e
        _complete(run_dir, tmp, final, step, keep_last, t0, fence)
        return final
    request = dist_checkpointing.save(state, str(tmp), async_sharded_save=True)
    request.finalize_fns.append(lambda: _complete(run_dir, tmp, final, step, keep_last, t0, fence))
    async_queue.schedule_async_request(request)
    if _rank() == 0:
        log.info("checkpoint %s: writing in the background", final.name)
    return final


def _complete(
    run_dir: str | Path, tmp: Path, final: Path, step: int, keep_last: int, t0: float, fence: Fence | None = None
) -> None:
    """All ranks have written ``tmp``: checksum the files, write the marker, rename into place, prune. Collective."""
    _barrier()
    _check_fence(fence)  # a run whose lease was taken over publishes nothing (every rank raises)
    files = {str(f.relative_to(tmp)): f.stat().st_size for f in sorted(tmp.rglob("*")) if f.is_file()}
    sums = _checksums(tmp, sorted(files))
    if _rank() == 0:
        meta = {"step": step, "time": time.time(), "files": files, "sha256": sums}
        write_text_atomic(tmp / MARKER, json.dumps(meta, indent=1))  # fsynced, as its directory
        if final.exists():  # a rerun of the same step (e.g. after a crash past the rename)
            shutil.rmtree(final)
        tmp.rename(final)
        fsync_dir(final.parent)  # the rename survives a node crash
        _prune(run_dir, keep_last, step)
        log.info("saved checkpoint %s in %.1fs", final, time.time() - t0)
    _barrier()


def _check_fence(fence: Fence | None) -> None:
    """Raise OutputRefused on every rank when rank 0's FENCE no longer holds the lease. Collective."""
    lost = [""]
    if fence is not None and _rank() == 0 and not fence.holds():
        try:
            fence.check()
        except OutputRefused as e:
            lost[0] = str(e)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(lost, src=0)
    if lost[0]:
        raise OutputRefused(lost[0])


def _checksums(root: Path, names: list[str]) -> dict[str, str]:
    """SHA-256 of each file under ``root``, computed by all ranks in parallel (rank r hashes every world-th
    file) and gathered on every rank. Collective."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    mine = {name: file_sha256(root / name) for name in names[_rank() :: world]}
    if world == 1:
        return mine
    every: list[Any] = [None] * world
    dist.all_gather_object(every, mine)
    return {name: digest for part in every for name, digest in part.items()}


def verify_checksums(path: Path) -> str | None:
    """None when every file of the checkpoint has the SHA-256 its marker records, else what differs
    (midtrain.formats.checkpoints.checksum_problem, the ranks hashing in parallel). Collective."""
    return checksum_problem(path, _checksums)


def _sizes(path: Path) -> str | None:
    """The size check of a checkpoint, the same answer on every rank. Collective."""
    return _first_error(size_problem(path))


def resume_problem(path: Path) -> str | None:
    """Why a checkpoint cannot be resumed (a missing or cut file, a marker out of step, a file whose SHA-256
    differs from the one complete.json records), or None: the check of :func:`load_checkpoint` and of the
    trainer's pre-check. Collective: every rank gets the same answer."""
    return _sizes(path) or verify_checksums(path)


def verify_checkpoint(path: str | Path) -> Path:
    """The checkpoint at ``path`` (a checkpoints/iter_* directory, or a run directory's newest complete one, as
    :func:`latest_checkpoint` finds it for every reader) once every file complete.json lists has its recorded
    SHA-256; CheckpointError naming the file otherwise. What resume checks before loading, for the readers that
    start from a checkpoint (export, init_from, evaluation): they read the checkpoint their stamp names, never an
    older one. Collective when torch.distributed is initialised (ranks hash in parallel)."""
    found = latest_checkpoint(path, check=_sizes, required=True)
    problem = verify_checksums(found)
    if problem:
        raise CheckpointError(
            f"checkpoint {found} is damaged: {problem}; restore it, or name an older {CHECKPOINTS}/iter_* directory"
        )
    return found


def async_queue() -> Any:
    """A queue for background checkpoint writes (megatron-core's AsyncCallsQueue)."""
    from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

    return AsyncCallsQueue()


def finish_async_saves(queue: Any, blocking: bool, run_dir: str | Path | None = None) -> None:
    """Complete the background saves that are done (all of them with ``blocking``). Collective."""
    if queue is not None:
        try:
            queue.maybe_finalize_async_calls(blocking=blocking)
        except (Exception, _checkpoint_exception()) as e:
            raise write_error(e, Path(run_dir or ".") / CHECKPOINTS) from e


def write_error(e: BaseException, where: Path) -> OSError:
    """An OSError for a checkpoint write that failed, saying why in words: torch reports a full disk or a
    file-size limit as ``inline_container.cc ... unexpected pos`` or ``file write failed``. The partial
    ``.tmp`` directory is removed (it frees the space; resume never reads it)."""
    import errno
    import resource

    cause = _describe(e)
    try:
        free = shutil.disk_usage(where if where.exists() else where.parent).free
    except OSError:
        free = None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        code, why = errno.EFBIG, f"this process may write files of at most {soft} bytes (ulimit -f)"
    elif free is not None and free < 1 << 30:
        code, why = errno.ENOSPC, f"the filesystem has {free / 2**20:.0f} MiB free"
    else:
        code, why = errno.EIO, "a full disk, a quota or a failing filesystem"
    if _rank() == 0 and where.name.endswith(".tmp"):
        shutil.rmtree(where, ignore_errors=True)
    return OSError(code, f"checkpoint could not be written ({why}; {cause})", str(where))


def _prune(run_dir: str | Path, keep_last: int, saved: int) -> None:
    """Keep the ``keep_last`` newest complete checkpoints up to the one just saved (step ``saved``).

    Nothing newer than the checkpoint just saved is deleted (it was not trained over by this run), and a
    damaged checkpoint is deleted only when it is older than every checkpoint kept."""
    found = list_checkpoints(run_dir)
    kept: list[int] = []
    for step, path in reversed(found):
        if step <= saved and len(kept) < keep_last and size_problem(path) is None:
            kept.append(step)
    if kept:
        for step, path in found:
            if step < min(kept):
                shutil.rmtree(path, ignore_errors=True)
    for stale in (Path(run_dir) / CHECKPOINTS).glob("iter_*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)


def _first_error(error: str | None) -> str | None:
    """The error of the lowest rank that has one, on every rank (so all ranks take the same branch). Collective."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return error
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, error)
    for rank, e in enumerate(every):
        if e is not None:
            return e if rank == _rank() else f"on rank {rank}: {e}"
    return None


def _describe(e: BaseException) -> str:
    """One line for an exception; for torch's CheckpointException (a header, then each rank's traceback)
    the last line of the traceback, which holds the cause."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("CheckpointException ranks"):
        return lines[-1][:2000]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:2000]


def load_checkpoint(
    run_dir: str | Path, model: torch.nn.Module, optimizer: Any, verified: Path | None = None
) -> tuple[Path, dict] | None:
    """Restore model, optimizer and RNG from the newest complete checkpoint; returns (path, common state).

    None when the run directory has no checkpoint (a fresh start). A damaged checkpoint (missing, cut or
    changed files) is reported and the previous one is used; when every checkpoint is damaged, or a complete
    one fails to load, :class:`CheckpointError` names the checkpoint and why. VERIFIED: the checkpoint of
    RUN_DIR that :func:`resume_problem` has just passed (the trainer's pre-check chose it the same way), loaded
    without hashing its files again (minutes for a large checkpoint). Collective.
    """
    if not list_checkpoints(run_dir):
        return None
    path = verified or latest_checkpoint(
        run_dir,
        check=resume_problem,
        required=True,
        then="The run cannot resume: restore them, or move the directory aside to start the run over",
    )
    return path, _load(path, model, optimizer)


def read_common(path: str | Path) -> dict[str, Any]:
    """The common state of one checkpoint (step, scheduler, loader, and the model shape, schedule and tokenizer
    it was written for), read without building a model; CheckpointError naming the checkpoint when unreadable."""
    from megatron.core import dist_checkpointing

    try:
        return dist_checkpointing.load_common_state_dict(str(path)).get("common", {})
    except (Exception, _checkpoint_exception()) as e:
        raise CheckpointError(f"checkpoint {path} cannot be loaded: {_describe(e)}") from e


def model_shape(model_cfg: ModelConfig) -> dict[str, Any]:
    """What a checkpoint records of the model it holds: the fields that fix its parameters' names and shapes
    (train.config.RESUME_FIXED), so a load onto another model is refused naming them, config.yaml or not."""

    return {k.split(".", 1)[1]: getattr(model_cfg, k.split(".", 1)[1]) for k in RESUME_FIXED if k.startswith("model.")}


def shape_conflicts(common: dict[str, Any], model_cfg: ModelConfig) -> list[str]:
    """'model.FIELD: checkpoint -> this config' for each recorded shape field that differs (none recorded: [])."""
    saved, now = common.get("model_shape") or {}, model_shape(model_cfg)
    return [f"model.{k}: {saved[k]!r} -> {now[k]!r}" for k in now if k in saved and saved[k] != now[k]]


def tokenizer_conflict(common: dict[str, Any], manifest: dict[str, Any]) -> str | None:
    """Why the shards' tokenizer (their manifest) is not the one the checkpoint was trained with, or None (the
    same content hash, or a checkpoint that records none: an HF conversion, an initial checkpoint)."""
    saved, now = common.get("tokenizer") or {}, manifest.get("tokenizer") or {}
    if not saved.get("hash") or not now.get("hash") or saved["hash"] == now["hash"]:
        return None

    def name(t: dict[str, Any]) -> str:
        return f"{t.get('file', '?')} (hash {t['hash']}, {t.get('vocab_size', '?')} tokens)"

    return f"the checkpoint was trained on shards tokenized with {name(saved)}, these shards with {name(now)}"


def _uses_distributed_optimizer(optimizer: Any) -> bool:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    parts = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    return any(isinstance(o, DistributedOptimizer) for o in parts)


def _load(path: Path, model: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
    """Load one verified checkpoint into model/optimizer/RNG; the common state. CheckpointError on failure."""
    from megatron.core import dist_checkpointing

    common: dict[str, Any] = {}
    error = None
    try:
        common = dist_checkpointing.load_common_state_dict(str(path)).get("common", {})
    except (Exception, _checkpoint_exception()) as e:  # noqa: BLE001 - reported with the checkpoint's name
        error = _describe(e)
    if error := _first_error(error):
        raise CheckpointError(f"checkpoint {path} cannot be loaded: {error}")
    if optimizer is not None and "scheduler" not in common:
        # A weights-only checkpoint (step-0 initial weights, an HF conversion): start from its
        # weights with a fresh optimizer, schedule and data position.
        _load_weights(path, model)  # verified above
        return {"step": 0, "weights_only": True}
    saved, now = common.get("layout"), layout()
    same_mp = saved is not None and all(saved.get(k) == now[k] for k in ("tensor", "pipeline"))
    if saved is not None and not same_mp and optimizer is not None and _uses_distributed_optimizer(optimizer):
        raise CheckpointError(
            f"checkpoint {path} was written at TP={saved.get('tensor')} PP={saved.get('pipeline')}, this run is "
            f"TP={now['tensor']} PP={now['pipeline']}: the distributed optimizer's state reshards over data "
            f"parallelism only. Resume at the checkpoint's TP/PP, or start from its weights with init_from={path}"
        )
    error, loaded = None, {}
    try:
        # no_grad: the distributed optimizer copies the loaded fp32 state into views of parameters that require
        # grad (its fp32 params are the model's own), which autograd refuses outside no_grad (megatron's loader
        # runs under it too)
        with torch.no_grad():
            _init_torch_adam_state(optimizer)
            loaded = _load_sharded(_sharded_state(model, optimizer, {}, is_loading=True, with_rng=same_mp), path)
            _load_model_state(model, loaded["model"])
            if optimizer is not None:
                optimizer.load_state_dict(loaded["optimizer"])
                _init_torch_adam_state(optimizer, restored=True)
    except (Exception, _checkpoint_exception()) as e:
        log.debug("loading %s failed", path, exc_info=True)  # the traceback with -v
        error = _describe(e)
    if error := _first_error(error):
        raise CheckpointError(f"checkpoint {path} cannot be loaded: {error}")
    if same_mp:
        _set_rng_state(loaded["rng"][0])
    else:
        log.warning(
            "checkpoint %s was written at %s, this run is %s: RNG states reset from the seed (megatron "
            "keeps them per tensor/pipeline rank)",
            path,
            saved or "an older layout",
            now,
        )
    if saved is not None and saved != now and _rank() == 0:
        log.info(
            "resuming a checkpoint written at TP=%s PP=%s CP=%s DP=%s on TP=%d PP=%d CP=%d DP=%d",
            saved.get("tensor"),
            saved.get("pipeline"),
            saved.get("context"),
            saved.get("data"),
            now["tensor"],
            now["pipeline"],
            now["context"],
            now["data"],
        )
    log.info("resumed from %s (step %s)", path, common.get("step"))
    return loaded["common"]


def _init_torch_adam_state(optimizer: Any, restored: bool = False) -> None:
    """Give a fresh distributed optimizer's inner torch Adam its (zero) state before a load asks for it, and
    after the load (``restored``) its per-parameter step from the loaded parameter groups.

    Without Apex or TE (CPU mode) megatron's DistributedOptimizer reads the inner torch Adam's ``step`` to build
    the sharded state dict, which a fresh optimizer does not have yet (``assert len(steps) == 1``); the load
    replaces the moments and records the step per parameter group only. With Apex/TE (GPUs) megatron's fused
    Adam keeps the step per group itself."""
    from megatron.core.optimizer import distrib_optimizer

    if optimizer is None or getattr(distrib_optimizer, "HAVE_APEX_OR_TE", True):
        return
    for member in getattr(optimizer, "chained_optimizers", None) or [optimizer]:
        inner = getattr(member, "optimizer", None)
        if not isinstance(member, distrib_optimizer.DistributedOptimizer) or not isinstance(inner, torch.optim.Adam):
            continue
        for group in inner.param_groups:
            for param in group["params"]:
                if restored and group.get("step") is not None:
                    inner.state[param]["step"] = torch.tensor(float(group["step"]), dtype=torch.float32)
                elif not inner.state[param]:
                    inner.state[param] = {
                        "step": torch.zeros((), dtype=torch.float32),
                        "exp_avg": torch.zeros_like(param),
                        "exp_avg_sq": torch.zeros_like(param),
                    }


def _checkpoint_exception() -> type[BaseException]:
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception

    return CheckpointException


def _load_sharded(sharded: dict[str, Any], path: Path, drop_unused: bool = False) -> dict[str, Any]:
    """dist_checkpointing.load, tolerating the one kind of key a checkpoint may lack: Transformer Engine's
    ``_extra_state`` (FP8 scaling metadata; a checkpoint written with the local layer spec, e.g. by
    ``convert hf2mcore``, has none). Any other tensor the checkpoint lacks is an error naming it, and so is a
    model tensor of the checkpoint that this model has no place for (trained weights would be dropped: q/k
    layernorm into a model without it, say) unless ``drop_unused``."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.validation import StrictHandling

    # RETURN_ALL also lists the checkpoint's keys nobody asked for; it exchanges metadata over the ranks
    strict = StrictHandling.RETURN_ALL if dist.is_initialized() else StrictHandling.RETURN_UNEXPECTED
    loaded, missing, unexpected = dist_checkpointing.load(sharded, str(path), strict=strict)
    absent = sorted(k for k in unexpected if not k.endswith(EXTRA_STATE))
    if absent:
        raise CheckpointError(
            f"the checkpoint has no {', '.join(absent[:3])}"
            + (f" (and {len(absent) - 3} more)" if len(absent) > 3 else "")
            + ": it was written for another model shape or layer spec"
        )
    # the optimizer's state and the RNG are asked for only on a full resume; a weights-only load leaves them
    unused = sorted(k for k in missing if not (k.startswith(("optimizer.", RNG_KEY)) or k.endswith(EXTRA_STATE)))
    if unused and not drop_unused:
        raise CheckpointError(
            f"the checkpoint holds {', '.join(unused[:3])}"
            + (f" (and {len(unused) - 3} more)" if len(unused) > 3 else "")
            + " that this model has no place for: it was written for another model shape or "
            "layer spec (init_from_drop_unused=true drops them)"
        )
    if unused:
        log.warning(
            "checkpoint %s: %d tensors this model has no place for are dropped (init_from_drop_unused): %s",
            path,
            len(unused),
            ", ".join(unused[:5]),
        )
    if unexpected:
        log.info(
            "checkpoint %s has no Transformer Engine extra state (%d modules): the modules keep their fresh state",
            path,
            len(unexpected),
        )
    return loaded


def _load_model_state(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """load_state_dict, strict except for ``_extra_state`` entries (see :func:`_load_sharded`)."""
    result = unwrap(model).load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith(EXTRA_STATE)]
    unexpected = [k for k in result.unexpected_keys if not k.endswith(EXTRA_STATE)]
    if missing or unexpected:
        raise CheckpointError(f"model state mismatch: missing {missing[:3]}, unexpected {unexpected[:3]}")


def load_weights(path: str | Path, model: torch.nn.Module, drop_unused: bool = False) -> Path:
    """``init_from`` for midtrain checkpoints: model weights only. ``path`` = a run dir or a checkpoint dir.
    ``drop_unused``: a checkpoint tensor this model lacks is dropped with a warning instead of refused."""
    ckpt = latest_checkpoint(path)
    if ckpt is None:
        raise FileNotFoundError(f"init_from: no complete midtrain checkpoint in {path}")
    return _load_weights(verify_checkpoint(ckpt), model, drop_unused)  # the SHA-256s, as a resume checks them


def _load_weights(ckpt: Path, model: torch.nn.Module, drop_unused: bool = False) -> Path:
    try:
        with torch.no_grad():
            loaded = _load_sharded({"model": unwrap(model).sharded_state_dict()}, Path(ckpt), drop_unused)
            _load_model_state(model, loaded["model"])
    except (Exception, _checkpoint_exception()) as e:
        raise CheckpointError(f"checkpoint {ckpt} cannot be loaded into this model: {_describe(e)}") from e
    log.info("initialised weights from %s", ckpt)
    return ckpt
