"""The training loop: the same code on one CPU process and on GPUs under torchrun/srun.

megatron-core does the work: its forward-backward schedule (``get_forward_backward_func``, pipelined or
not), DDP with per-token loss normalisation over the global batch, its optimizer (Adam, gradient clipping)
and ``OptimizerParamScheduler`` (linear warmup, then WSD / cosine / constant). This module wires them to
the packed-shard loader; the non-finite guard, the step log and the checkpoints (interval and on a
signal) are the loop's callbacks (:class:`Callback`, as in OLMo-core's trainer).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from midtrain.config import ConfigError
from midtrain.formats.outputs import Fence, Lease, OutputRefused
from midtrain.formats.rundir import EXIT_REQUEUE
from midtrain.formats.shard_reader import MANIFEST, PackedDataset, PackedLoader
from midtrain.formats.stamp import RUN_INFO
from midtrain.locations import write_text_atomic
from midtrain.train import checkpoint as ckpt
from midtrain.train import distributed, moe
from midtrain.train.batch import Batch, to_batch
from midtrain.train.config import SCHEDULE_FIELDS, TrainConfig
from midtrain.train.flops import FLOPS_COUNT, flops_from_sums, fp8_peak_tflops, peak_tflops
from midtrain.train.gpu_choices import installed_te_version, installed_version, native_bf16_cpu, stack_version_problem
from midtrain.train.layout import resolve_data_parallel
from midtrain.train.logger import RunLogger
from midtrain.train.model import build_gpt_model, count_parameters, resolve_impl
from midtrain.train.resume import check_resumable, run_inputs, schedule_conflicts, schedule_of

if TYPE_CHECKING:
    from megatron.core.distributed import DistributedDataParallel

log = logging.getLogger("midtrain.train")


class NonFiniteError(RuntimeError):
    """Loss or gradient norm became NaN/Inf."""


@dataclass
class _StepStats:
    """What one step's micro-batches report back, summed on this rank."""

    by_source: torch.Tensor  # [n_sources, 2] (loss sum, tokens)
    loss_sum: float = 0.0
    tokens: float = 0.0
    indices: list[int] = field(default_factory=list)
    doc_lengths: list[list[int]] = field(default_factory=list)


class _SignalFlag:
    """SIGTERM/SIGUSR1 set a flag; the loop checkpoints at the next step boundary and exits 75."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. a test harness): no handlers
                pass

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum
        log.warning(
            "received %s: will checkpoint after this step and exit %d", signal.Signals(signum).name, EXIT_REQUEUE
        )

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def any_rank(self) -> bool:
        flag = torch.tensor([1 if self.received is not None else 0], dtype=torch.int64, device=_device())
        if dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def _loss_func(batch: Batch, n_sources: int, output: torch.Tensor):
    """Per-token loss summed over the micro-batch's trained positions (the schedule divides by the global count)."""
    losses = output.float().reshape(-1)
    mask = batch.loss_mask.reshape(-1).float()
    loss_sum = (losses * mask).sum()
    tokens = mask.sum()
    src = batch.source_ids.reshape(-1).clamp(min=0)
    by_source = torch.zeros(n_sources, 2, dtype=torch.float64, device=losses.device)
    if n_sources:
        by_source[:, 0].index_add_(0, src, (losses.detach() * mask).double())
        by_source[:, 1].index_add_(0, src, mask.double())
    reported = {"loss": torch.stack([loss_sum.detach().double(), tokens.double()]), "by_source": by_source}
    return loss_sum, tokens.to(torch.int), reported


def _forward_step(n_sources: int, data_iterator: Iterator[Batch], model: torch.nn.Module, moe_model: bool = False):
    batch = next(data_iterator)
    # MoE: the router's load-balancing and z-losses count only real tokens when megatron gets the padding
    # mask (True = padding); without it the padding piece of every packed sequence is routed and counted.
    extra = {"padding_mask": batch.source_ids < 0} if moe_model else {}
    output = model(
        batch.tokens, batch.position_ids, None, labels=batch.labels, packed_seq_params=batch.packed_seq_params, **extra
    )
    return output, partial(_loss_func, batch, n_sources)


class _BatchIterator:
    """Wraps the PackedLoader: reader dicts -> Batch on this device/CP rank; records what the step used."""

    def __init__(self, loader: Any, cp_size: int, cp_rank: int, cu_seqlens_on_host: bool = False) -> None:
        self.loader, self.cp_size, self.cp_rank = loader, cp_size, cp_rank
        self.cu_seqlens_on_host = cu_seqlens_on_host
        self._it = iter(loader)
        self.used: list[Batch] = []

    def __iter__(self) -> _BatchIterator:
        return self

    def __next__(self) -> Batch:
        batch = to_batch(next(self._it), _device(), self.cp_size, self.cp_rank, self.cu_seqlens_on_host)
        self.used.append(batch)
        return batch


def _require_shards(cfg: TrainConfig) -> None:
    """Fail before building the model when data.path holds no packed shards."""
    path = Path(cfg.data.path)
    if not (path / MANIFEST).exists():
        raise FileNotFoundError(
            f"data.path: {path} has no {MANIFEST}; run `midtrain pack ... --output {path}` "
            "first (or `midtrain demo --only prep pack` for the demo's shards)"
        )


def check_shards(cfg: TrainConfig, manifest: dict) -> None:
    """The shards fit the recipe: sequence length, vocabulary, piece padding for context parallelism."""
    seq = int(manifest["seq_length"])
    if seq != cfg.data.seq_length:
        raise ConfigError(
            f"data.seq_length: {cfg.data.seq_length} but the shards in {cfg.data.path} are packed "
            f"at {seq}; set data.seq_length={seq} or repack"
        )
    cp, tp = cfg.parallel.context, cfg.parallel.tensor
    need = 2 * cp * (tp if cfg.parallel.sequence_parallel else 1) if cp > 1 else 1
    have = int(manifest.get("pad_multiple", 1))
    if have % need:
        raise ConfigError(
            f"parallel.context: context={cp} needs every document piece padded to a multiple of "
            f"{need}, but {cfg.data.path} was packed with pad_multiple={have}; repack with "
            f"pad_multiple={need}"
        )
    vocab = manifest.get("vocab_size") or (manifest.get("tokenizer") or {}).get("vocab_size")
    if vocab and int(vocab) > cfg.model.vocab_size:
        raise ConfigError(
            f"model.vocab_size: {cfg.model.vocab_size} is smaller than the shards' tokenizer vocabulary ({vocab})"
        )


def _open_data(cfg: TrainConfig, dp_rank: int, dp_size: int):

    dataset = PackedDataset(cfg.data.path, "train")
    check_shards(cfg, dataset.manifest)
    sources = list(dataset.manifest.get("sources") or [])
    if sources and isinstance(sources[0], dict):
        sources = [s.get("name", str(i)) for i, s in enumerate(sources)]
    return dataset, PackedLoader(dataset, seed=cfg.data.seed, dp_rank=dp_rank, dp_size=dp_size), sources


def build_optimizer(cfg: TrainConfig, model: torch.nn.Module) -> tuple[Any, Any]:
    """megatron's optimizer (Adam, clipping, the distributed optimizer when set) and its LR/WD scheduler."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    o = cfg.optim
    bf16 = cfg.precision.dtype == "bf16"
    oc = OptimizerConfig(
        optimizer="adam",
        lr=o.lr,
        min_lr=o.min_lr,
        weight_decay=o.weight_decay,
        adam_beta1=o.beta1,
        adam_beta2=o.beta2,
        adam_eps=o.eps,
        clip_grad=o.clip_grad,
        bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        use_distributed_optimizer=cfg.parallel.distributed_optimizer,
    )
    optimizer = get_megatron_optimizer(oc, [model])
    style = {"wsd": "WSD", "cosine": "cosine", "constant": "constant"}[o.decay_style]
    decay_steps = max(o.train_steps, o.warmup_steps + 1)
    # On a resume (load_state_dict) megatron keeps the checkpoint's values (use_checkpoint), takes this config's
    # (override), or asserts they agree (neither; check_resumable has refused a mismatch by then, naming it).
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=0.0,
        max_lr=o.lr,
        min_lr=o.min_lr,
        lr_warmup_steps=o.warmup_steps,
        lr_decay_steps=decay_steps,
        lr_decay_style=style,
        start_wd=o.weight_decay,
        end_wd=o.weight_decay,
        wd_incr_steps=decay_steps,
        wd_incr_style="constant",
        wsd_decay_steps=_wsd_decay_steps(o.wsd_decay_fraction, o.train_steps) if style == "WSD" else None,
        lr_wsd_decay_style="linear" if style == "WSD" else None,
        use_checkpoint_opt_param_scheduler=o.schedule_on_resume == "checkpoint",
        override_opt_param_scheduler=o.schedule_on_resume == "config",
    )
    return optimizer, scheduler


def _wsd_decay_steps(fraction: float, train_steps: int) -> int:
    return max(1, round(fraction * train_steps))


def wrap_model(cfg: TrainConfig, model: torch.nn.Module) -> DistributedDataParallel:
    """The model as the loop trains it: Float16Module for bf16, inside megatron's DDP."""
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.transformer.module import Float16Module

    tc = model.config
    if cfg.precision.dtype == "bf16":
        model = Float16Module(tc, model)
    return DistributedDataParallel(config=tc, ddp_config=ddp_config(cfg), module=model)


def ddp_config(cfg: TrainConfig):
    """megatron DDP settings: fp32 gradient reduction; with the distributed optimizer the gradient
    reduce-scatter overlaps the backward pass and the parameter all-gather overlaps the next forward."""
    from megatron.core.distributed import DistributedDataParallelConfig

    overlap = cfg.parallel.distributed_optimizer
    return DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=overlap,
        overlap_param_gather=overlap,
        use_distributed_optimizer=cfg.parallel.distributed_optimizer,
    )


def _sync_params(model: DistributedDataParallel) -> None:
    """Finish the parameter all-gather now (it is otherwise deferred into the next forward with
    overlap_param_gather), so every rank holds the full updated weights, e.g. before a checkpoint."""
    if model.ddp_config.overlap_param_gather:
        model.start_param_sync(force_sync=True)


def _init_weights(cfg: TrainConfig, model: torch.nn.Module) -> None:
    """init_from: weights only, from a midtrain checkpoint, or a Hugging Face directory (train.hf_import)."""
    assert cfg.init_from is not None  # called only when it is set
    path = Path(cfg.init_from)
    if (path / "config.json").is_file():
        try:
            from midtrain.train.hf_import import load_hf_into
        except ImportError as e:
            raise ConfigError(
                f"init_from: {path} is a Hugging Face directory but HF import is not available ({e})"
            ) from None
        load_hf_into(ckpt.unwrap(model), path, cfg.model)  # checks the recipe's shape against config.json
        log.info("initialised weights from Hugging Face model %s", path)
    else:
        ckpt.load_weights(path, model, drop_unused=cfg.init_from_drop_unused)


def schedule_seq_length(cfg: TrainConfig) -> int:
    """The ``seq_length`` for megatron's forward-backward schedule: the full packed length.

    The pipeline schedule sizes the activations sent between stages itself, dividing by the context-parallel
    size (and by TP with sequence parallelism), which is exactly this rank's share of the THD batch.
    """
    return cfg.data.seq_length


def _reduce(tensor: torch.Tensor, group: Any) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(tensor, group=group)
    return tensor


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Train a recipe; returns a summary with ``exit_code`` (0 done, 75 checkpointed on a signal)."""
    from megatron.core import parallel_state
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func

    cfg.validate()
    problem = stack_version_problem(installed_version("megatron-core"), installed_te_version())
    if problem:
        raise ConfigError(problem)
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        # megatron-core logs its full configs and bucket layouts at INFO; keep them for -v.
        logging.getLogger("megatron").setLevel(logging.WARNING)
    p = cfg.parallel
    env = distributed.initialize(
        p.tensor, p.pipeline, p.context, seed=cfg.seed, expert=p.expert, expert_tensor=p.expert_tensor
    )
    lease = _claim_run_dir(cfg, env)  # a second training of this run_dir stops here, naming the first
    flag = _SignalFlag()
    if threading.current_thread() is threading.main_thread():
        ckpt.shield_checkpoint_helper()
    flag.install()
    try:
        return _train(cfg, env, flag, parallel_state, finalize_model_grads, get_forward_backward_func, lease)
    finally:
        flag.restore()
        if lease is not None:
            lease.release()


def _claim_run_dir(cfg: TrainConfig, env: Any) -> Lease | None:
    """Rank 0 holds RUN_DIR's lease (formats.outputs) for the whole run; when another live training holds it,
    every rank raises the same OutputRefused, naming that holder, before anything is written."""
    lease, refused = None, ""
    if env.rank == 0:
        try:
            lease = Lease(cfg.run_dir, f"training {cfg.name}").acquire()
        except OutputRefused as e:
            refused = str(e)
    if env.world_size > 1:
        box = [refused]
        dist.broadcast_object_list(box, src=0)
        refused = box[0]
    if refused:
        raise OutputRefused(refused)
    return lease


@dataclass
class _Run:
    """What the loop works with, built whole by :func:`_build`: the model, optimizer, data and logging."""

    cfg: TrainConfig
    env: Any  # distributed.Env: rank, world size
    parallel_state: Any  # megatron.core.parallel_state
    run_dir: Path
    dp: int
    model: DistributedDataParallel
    optimizer: Any
    scheduler: Any
    dataset: Any
    loader: Any
    sources: list[str]
    step: int  # restored from a checkpoint, else 0
    batches: _BatchIterator
    forward_backward: Callable[..., Any]  # megatron's pipeline schedule
    logger: RunLogger  # continues from the restored step
    dp_cp_group: Any
    last_stage: bool
    peak: float | None
    saves: Any  # the async checkpoint queue, or None
    fence: Fence | None = None  # the run directory's lease (formats.outputs): checkpoints are published under it
    stop_requested: bool = False  # a signal reached a rank: the loop ends after this step's checkpoint

    @property
    def rank0(self) -> bool:
        return self.env.rank == 0


@dataclass
class _StepResult:
    """One optimizer step's outcome, as logged: the global-batch loss and the reduced sums behind it."""

    step: int
    loss: float
    grad_norm: float | None
    totals: torch.Tensor  # [loss sum, tokens, per-source (loss sum, tokens)..., computed tokens, sum l^2]
    dt: float
    skipped: bool
    router: dict[str, float]  # MoE router metrics; {} for dense models
    no_loss_tokens: bool = False  # the global batch had no trained position: no optimizer update


def _train(
    cfg, env, flag, parallel_state, finalize_model_grads, get_forward_backward_func, lease=None
) -> dict[str, Any]:
    run = _build(cfg, env, parallel_state, finalize_model_grads, get_forward_backward_func)
    run.fence = lease.fence if lease is not None else None  # a checkpoint is published only under it
    callbacks: list[Callback] = [NonFiniteGuard(), StepLog(), Checkpointer(flag)]
    exit_code, last_loss = 0, float("nan")
    run.model.train()
    with contextlib.ExitStack() as closing:
        for cb in callbacks:  # closed last first, each also after another one's close or the loop raised
            closing.push(partial(_close, cb, run))
        while run.step < cfg.optim.train_steps:
            result = _step(run)
            last_loss = result.loss
            for cb in callbacks:
                cb.post_step(run, result)
            if run.stop_requested and run.step < cfg.optim.train_steps:
                if run.rank0:
                    log.warning(
                        "checkpointed at step %d after a signal; exiting %d (requeue to resume)", run.step, EXIT_REQUEUE
                    )
                exit_code = EXIT_REQUEUE
                break
    return {"exit_code": exit_code, "step": run.step, "loss": last_loss, "run_dir": str(run.run_dir)}


class Callback:
    """One concern of the loop beside the step itself (OLMo-core's trainer callbacks): it sees every finished
    step, in the order :func:`_train` lists them, and the end of the run, on every rank."""

    def post_step(self, run: _Run, result: _StepResult) -> None:
        """After each optimizer step (run.step is the step just taken)."""

    def close(self, run: _Run, error: BaseException | None) -> None:
        """Once when the loop ends: completed or stopped on a signal (error None), or raising ``error``."""


def _close(cb: Callback, run: _Run, exc_type: Any, error: BaseException | None, tb: Any) -> None:
    cb.close(run, error)  # returns None: an error the loop raised goes on after every close


class NonFiniteGuard(Callback):
    """A non-finite loss or gradient norm: the update was skipped (guard.on_nonfinite=skip) up to
    guard.max_skipped steps in a row, else NonFiniteError (on every rank: the loss and norm are reduced)."""

    def __init__(self) -> None:
        self.skipped_in_row = 0

    def post_step(self, run: _Run, result: _StepResult) -> None:
        if not result.skipped:
            self.skipped_in_row = 0
            return
        cfg, loss, grad_norm = run.cfg, result.loss, result.grad_norm
        where = _describe_batch(run.batches.used, run.dp_cp_group)
        msg = (
            f"non-finite {'loss' if not math.isfinite(loss) else 'gradient norm'} at step {result.step} "
            f"(loss={loss}, grad_norm={grad_norm}); packed sequences {where} of {cfg.data.path}"
        )
        self.skipped_in_row += 1
        if cfg.guard.on_nonfinite == "stop" or self.skipped_in_row > cfg.guard.max_skipped:
            raise NonFiniteError(
                msg + ("" if cfg.guard.on_nonfinite == "stop" else f"; {self.skipped_in_row} skipped steps in a row")
            )
        log.warning("%s: update skipped (guard.on_nonfinite=skip)", msg)


class StepLog(Callback):
    """One metrics record a step (console, metrics.jsonl, TensorBoard, W&B) from the rank that holds the loss."""

    def post_step(self, run: _Run, result: _StepResult) -> None:
        if run.rank0 or run.last_stage:
            _log_step(run, result)

    def close(self, run: _Run, error: BaseException | None) -> None:
        run.logger.close()


class Checkpointer(Callback):
    """Saves at the save interval, at the end and, when any rank got SIGTERM/SIGUSR1, after this step; a signal
    also asks the loop to stop (exit 75). The end of the run waits for the background saves in flight."""

    def __init__(self, flag: _SignalFlag) -> None:
        self.flag = flag

    def post_step(self, run: _Run, result: _StepResult) -> None:
        run.stop_requested = stop = self.flag.any_rank()
        cfg, step = run.cfg, run.step
        save_now = step % cfg.checkpoint.save_interval == 0 or (
            step == cfg.optim.train_steps and cfg.checkpoint.save_final
        )
        # background saves: complete those that are done; at most one in flight, none left at the end
        ckpt.finish_async_saves(run.saves, blocking=save_now or stop, run_dir=run.run_dir)
        if save_now or stop:
            _sync_params(run.model)
            common = {
                "step": step,
                "scheduler": run.scheduler.state_dict(),
                "loader": run.loader.state_dict(),
                "name": cfg.name,
                "model_shape": ckpt.model_shape(cfg.model),
                "schedule": schedule_of(cfg),
                "tokenizer": _tokenizer_record(run.dataset.manifest),
            }
            ckpt.save_checkpoint(
                run.run_dir,
                step,
                run.model,
                run.optimizer,
                common,
                cfg.checkpoint.keep_last,
                async_queue=run.saves,
                fence=run.fence,
            )

    def close(self, run: _Run, error: BaseException | None) -> None:
        # A non-finite stop is collective (every rank raises), so the completion can run: the background writes
        # in flight hold steps that finished before the bad one and must not be lost. After another error a
        # rank may be gone, and a collective completion would hang.
        if run.saves is not None and (error is None or isinstance(error, NonFiniteError)):
            run.saves.close()


def _build(
    cfg: TrainConfig, env: Any, parallel_state: Any, finalize_model_grads: Any, get_forward_backward_func: Any
) -> _Run:
    """Run directory and config.yaml, then the model, optimizer and data (in this order: the RNG draws), the
    restore (a checkpoint, init_from's weights, or none), then the batch iterator, megatron's schedule, the
    logger and process groups; run_info.json on rank 0."""
    dp = resolve_data_parallel(cfg, env.world_size)  # a layout that does not fit fails before anything is written
    run_dir = Path(cfg.run_dir)
    verified = check_resumable(cfg, run_dir)  # on every rank, before anything is written
    inputs = run_inputs(cfg, run_dir) if env.rank == 0 else None  # before run_info.json is written again
    if env.rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg.save_yaml(run_dir / "config.yaml")
    _require_shards(cfg)

    moe.reset_router_log()
    model = wrap_model(cfg, build_gpt_model(cfg))
    optimizer, scheduler = build_optimizer(cfg, model)
    tc = model.config
    tc.finalize_model_grads_func = finalize_model_grads
    tc.no_sync_func = model.no_sync
    tc.grad_scale_func = optimizer.scale_loss

    dataset, loader, sources = _open_data(cfg, parallel_state.get_data_parallel_rank(), dp)
    rank0, ps = env.rank == 0, parallel_state
    step = _restore(cfg, run_dir, model, optimizer, scheduler, loader, rank0, verified)
    if rank0 and step and cfg.optim.schedule_on_resume == "checkpoint":
        cfg.save_yaml(run_dir / "config.yaml")  # the checkpoint's schedule, which the steps follow
    batches = _BatchIterator(
        loader, cfg.parallel.context, ps.get_context_parallel_rank(), cu_seqlens_on_host=resolve_impl(cfg) == "local"
    )
    forward_backward = get_forward_backward_func()
    logger = RunLogger(run_dir, cfg, enabled=rank0, resume_step=step)
    dp_cp_group = ps.get_data_parallel_group(with_context_parallel=True)
    last_stage = ps.is_pipeline_last_stage(ignore_virtual=True)
    peak = peak_tflops(cfg)
    if rank0:
        _write_run_info(cfg, run_dir, env.world_size, dp, peak, sources, len(dataset), inputs)
    saves = ckpt.async_queue() if cfg.checkpoint.async_save else None
    return _Run(
        cfg=cfg,
        env=env,
        parallel_state=parallel_state,
        run_dir=run_dir,
        dp=dp,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        dataset=dataset,
        loader=loader,
        sources=sources,
        step=step,
        batches=batches,
        forward_backward=forward_backward,
        logger=logger,
        dp_cp_group=dp_cp_group,
        last_stage=last_stage,
        peak=peak,
        saves=saves,
    )


def _restore(
    cfg: TrainConfig,
    run_dir: Path,
    model: torch.nn.Module,
    optimizer: Any,
    scheduler: Any,
    loader: Any,
    rank0: bool,
    verified: Path | None = None,
) -> int:
    """Resume from the newest complete checkpoint (VERIFIED: the one check_resumable already hashed), or start
    from ``init_from``'s weights, or from scratch; the step the loop starts at."""
    resumed = ckpt.load_checkpoint(run_dir, model, optimizer, verified=verified)
    step, weights_loaded = 0, False
    if resumed is not None:
        path, common = resumed
        if common.get("weights_only"):
            weights_loaded = True
            if rank0:
                log.info("starting from the weights of %s (weights-only checkpoint; fresh optimizer)", path)
        else:
            step = int(common["step"])
            _restore_schedule(cfg, scheduler, common, rank0)
            try:
                loader.load_state_dict(common["loader"])
            except ValueError as e:  # shards changed under a checkpoint without a recorded manifest count
                raise ckpt.CheckpointError(f"checkpoint {path}: {e}") from None
            if rank0:
                log.info("resuming at step %d from %s", step, path)
    elif cfg.init_from:
        _init_weights(cfg, model)
        weights_loaded = True
    if weights_loaded:
        # With bf16 the optimizer keeps fp32 master copies of the weights, cloned when it was built, and
        # copies them back into the model after every update: refresh them from the loaded weights, or the
        # first step would put the initial (random) weights back. (A full resume restores the master
        # copies from the checkpoint's optimizer state instead.)
        optimizer.reload_model_params()
    return step


def _restore_schedule(cfg: TrainConfig, scheduler: Any, common: dict[str, Any], rank0: bool) -> None:
    """Put the scheduler at the checkpoint's step, following the schedule optim.schedule_on_resume names (strict:
    the same one, checked by check_resumable). cfg.optim is set to the schedule in effect, which later
    checkpoints and config.yaml record."""
    mode, changed = cfg.optim.schedule_on_resume, schedule_conflicts(common, cfg)
    saved = common.get("schedule")
    if mode == "checkpoint" and saved is not None:
        # megatron's scheduler state lacks WSD's decay length: take it from the recorded schedule too
        if saved.get("decay_style") == "wsd":
            scheduler.wsd_decay_steps = _wsd_decay_steps(saved["wsd_decay_fraction"], saved["train_steps"])
        keep = {k: saved[k] for k in SCHEDULE_FIELDS if k != "train_steps"}
        cfg.optim = cfg.optim.replace(**keep)  # config.yaml and later checkpoints say what the steps used
    before = _lr_at(common, scheduler) if changed and mode == "config" else None
    scheduler.load_state_dict(common["scheduler"])
    if mode == "config":
        # megatron's scheduler computes each parameter group's lr from the group's own max_lr/min_lr (set from
        # the config when the optimizer was built), and the optimizer's load has just put the checkpoint's back
        for group in scheduler.optimizer.param_groups:
            group["max_lr"], group["min_lr"] = scheduler.max_lr, scheduler.min_lr
    if changed and rank0:
        log.warning(
            "optim.schedule_on_resume=%s: %s; %s",
            mode,
            "; ".join(changed),
            f"the lr at step {scheduler.num_steps} is {scheduler.get_lr({}):.3g} "
            f"(the checkpoint's schedule: {before:.3g})"
            if before is not None
            else "the steps follow the checkpoint's schedule (past its decay steps: min_lr)",
        )


def _lr_at(common: dict[str, Any], scheduler: Any) -> float:
    """The lr of the checkpoint's own schedule at its step (what the resumed step would have had)."""
    sched = common["scheduler"]
    old = copy.copy(scheduler)
    old.max_lr, old.min_lr, old.lr_warmup_steps = sched["max_lr"], sched["min_lr"], sched["lr_warmup_steps"]
    old.lr_decay_steps, old.lr_decay_style, old.num_steps = (
        sched["lr_decay_steps"],
        sched["lr_decay_style"],
        sched["num_steps"],
    )
    saved = common.get("schedule")
    if saved and saved.get("decay_style") == "wsd":
        old.wsd_decay_steps = _wsd_decay_steps(saved["wsd_decay_fraction"], saved["train_steps"])
    return float(old.get_lr({}))


def _write_run_info(
    cfg: TrainConfig,
    run_dir: Path,
    world_size: int,
    dp: int,
    peak: float | None,
    sources: list[str],
    train_sequences: int,
    inputs: dict[str, Any] | None,
) -> None:
    """RUN_DIR/run_info.json: how the run is laid out and counted, and the content ids of its INPUTS (run_inputs;
    None: unknown, not recorded), which the callers that reuse a finished run compare (run_stamp)."""
    info = {
        "name": cfg.name,
        "flops_count": FLOPS_COUNT,
        "parameters": count_parameters(cfg),
        "layer_impl": resolve_impl(cfg),
        "world_size": world_size,
        "data_parallel": dp,
        "cpu_mode": not torch.cuda.is_available(),
        "peak_tflops_per_device": peak,
        "mfu_against": "dense BF16 peak"
        + (" (FP8 runs: mfu_fp8_peak against twice that)" if cfg.precision.fp8 != "none" else ""),
        "sources": sources,
        "shards": str(cfg.data.path),
        "train_sequences": train_sequences,
        **({"inputs": inputs} if inputs is not None else {}),
    }
    write_text_atomic(run_dir / RUN_INFO, json.dumps(info, indent=1))  # a kill mid-write leaves the old one
    log.info(
        "training %s: %d steps x %d sequences x %d tokens | TP=%d PP=%d CP=%d DP=%d | %s | %s",
        cfg.name,
        cfg.optim.train_steps,
        cfg.optim.global_batch_size,
        cfg.data.seq_length,
        cfg.parallel.tensor,
        cfg.parallel.pipeline,
        cfg.parallel.context,
        dp,
        "CPU mode" if not torch.cuda.is_available() else torch.cuda.get_device_name(),
        FLOPS_COUNT,
    )
    _warn_emulated_bf16(cfg)


def _warn_emulated_bf16(cfg: TrainConfig) -> None:
    if cfg.precision.dtype == "bf16" and not torch.cuda.is_available() and not native_bf16_cpu():
        log.warning(
            "precision.dtype=bf16 on a CPU without AMX or AVX512-BF16: torch emulates bf16 here, many times slower "
            "than fp32 (a SmolLM2-135M step: 182 s against ~6 s); precision.dtype=fp32 trains at full speed"
        )


def _step(run: _Run) -> _StepResult:
    """One optimizer step: forward-backward over the micro-batches, reduce the loss, update unless non-finite."""
    cfg, model, optimizer, batches = run.cfg, run.model, run.optimizer, run.batches
    n_sources, cp_size = len(run.sources), cfg.parallel.context
    micro_batches = cfg.optim.global_batch_size // run.dp
    t0 = time.perf_counter()
    batches.used.clear()
    model.zero_grad_buffer()
    optimizer.zero_grad()
    reported = run.forward_backward(
        forward_step_func=partial(_forward_step, n_sources, moe_model=cfg.model.is_moe),
        data_iterator=batches,
        model=[model],
        num_microbatches=micro_batches,
        seq_length=schedule_seq_length(cfg),
        micro_batch_size=1,
        forward_only=False,
    )
    stats = _step_stats(reported, n_sources, _device())
    router = moe.step_router_metrics(cfg, micro_batches)  # {} for dense models
    # Loss over the global batch: sum over micro-batches here, then over DP/CP ranks, then from the
    # last pipeline stage to all.
    # The same sums carry the attention-FLOPs terms (tokens computed and sum(l_i^2) of this rank's
    # sequences): each data-parallel rank holds different documents; CP ranks share theirs.
    computed, sum_sq = _flops_sums(batches.used)
    totals = torch.cat(
        [
            torch.tensor([stats.loss_sum, stats.tokens], dtype=torch.float64, device=_device()),
            stats.by_source.reshape(-1),
            torch.tensor([computed / cp_size, sum_sq / cp_size], dtype=torch.float64, device=_device()),
        ]
    )
    _reduce(totals, run.dp_cp_group)
    if cfg.parallel.pipeline > 1:
        pp_group = run.parallel_state.get_pipeline_model_parallel_group()
        dist.broadcast(totals, src=dist.get_global_rank(pp_group, pp_group.size() - 1), group=pp_group)
    loss = float(totals[0] / totals[1].clamp(min=1))
    # The LR of update k is the schedule at k (warmup starts above zero, not with a wasted step).
    run.scheduler.step(increment=1)
    found_inf = optimizer.prepare_grads()
    grad_norm = (
        moe.clip_grad_norm(optimizer, cfg.optim.clip_grad) if cfg.optim.clip_grad > 0 else optimizer.get_grad_norm()
    )
    finite = math.isfinite(loss) and grad_norm is not None and math.isfinite(grad_norm) and not found_inf
    run.step += 1
    # a batch without one trained position (an SFT piece that is all prompt) has zero gradients, but Adam's
    # moments and step count would still move the weights: no update, and the step says so
    empty = float(totals[1]) == 0.0
    if finite and not empty:
        optimizer.step_with_ready_grads()
    if torch.cuda.is_available():  # the step time includes the optimizer's kernels, not only their launch
        torch.cuda.synchronize()
    return _StepResult(
        step=run.step,
        loss=loss,
        grad_norm=grad_norm,
        totals=totals,
        dt=time.perf_counter() - t0,
        skipped=not finite,
        router=router,
        no_loss_tokens=empty,
    )


def _tokenizer_record(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint records of the tokenizer its shards were packed with (the manifest's content hash)."""
    tok = manifest.get("tokenizer") or {}
    return {k: tok[k] for k in ("file", "hash", "vocab_size") if k in tok}


def _step_stats(reported: list[dict], n_sources: int, device: torch.device) -> _StepStats:
    stats = _StepStats(by_source=torch.zeros(n_sources, 2, dtype=torch.float64, device=device))
    for r in reported:  # empty on non-last pipeline stages
        stats.loss_sum += float(r["loss"][0])
        stats.tokens += float(r["loss"][1])
        stats.by_source += r["by_source"].to(device)
    return stats


def _describe_batch(used: list[Batch], group: Any) -> str:
    """The dataset indices of this step's packed sequences on every data-parallel rank (for error messages)."""
    mine = [b.index for b in used]
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        every: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(every, mine, group=group)
        mine = [i for part in every for i in part]
    return str(sorted(set(mine)))


def _flops_sums(used: list[Batch]) -> tuple[float, float]:
    """Tokens computed (padding included) and sum of squared piece lengths of this rank's sequences."""
    return (float(sum(sum(b.doc_lengths) for b in used)), float(sum(n * n for b in used for n in b.doc_lengths)))


def _log_step(run: _Run, r: _StepResult) -> None:
    cfg, sources, world, peak, totals, dt = run.cfg, run.sources, run.env.world_size, run.peak, r.totals, r.dt
    n = len(sources)
    by_source = totals[2 : 2 + 2 * n].reshape(n, 2) if n else None
    loss_by_source = {
        name: float(by_source[i, 0] / by_source[i, 1])
        for i, name in enumerate(sources)
        if by_source is not None and by_source[i, 1] > 0
    }
    # Tokens processed this step by all data-parallel replicas (padding included: it is computed).
    tokens = cfg.optim.global_batch_size * cfg.data.seq_length
    # FLOPs of the whole global batch: token counts and sum(l_i^2) summed over the data-parallel ranks.
    flops = flops_from_sums(cfg, float(totals[-2]), float(totals[-1]))
    tflops_dev = flops / dt / world / 1e12
    fp8_peak = fp8_peak_tflops(cfg, peak)
    record = {
        "step": r.step,
        "loss": r.loss,
        "lr": run.optimizer.param_groups[0]["lr"],
        "grad_norm": float(r.grad_norm) if r.grad_norm is not None else None,
        "tokens_per_s": tokens / dt,
        "tokens_per_s_per_device": tokens / dt / world,
        "trained_tokens": int(totals[1]),
        "step_time_s": dt,
        "flops": flops,
        "tflops_per_device": tflops_dev,
        "mfu": tflops_dev / peak if peak else None,  # against the dense BF16 peak
        **({"mfu_fp8_peak": tflops_dev / fp8_peak} if fp8_peak else {}),
        "loss_by_source": loss_by_source,
        "skipped": r.skipped,
        "no_loss_tokens": r.no_loss_tokens,
        "time": time.time(),
        "process_cpu_s": time.process_time(),  # cumulative CPU time of this rank (bench/bench_step.py)
        **(r.router or {}),  # MoE: moe_load_balancing_loss, moe_aux_loss (midtrain/train/moe.py)
    }
    run.logger.step(record)
