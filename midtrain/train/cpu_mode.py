"""CPU mode: the one place that lets megatron-core run without CUDA (development, tests, the demo).

megatron-core 0.16 assumes CUDA in a handful of places. On a machine without CUDA those calls can only
raise, so redirecting them to the CPU changes nothing where CUDA exists. What is covered:

* device placement: ``device='cuda'`` / ``torch.cuda.current_device()`` in the global memory buffer,
  RoPE's ``inv_freq``, DDP's grad buffers and the optimizer's scalars — a TorchFunctionMode maps CUDA
  devices to the CPU, and ``Tensor.cuda()`` is the identity; the backward pass runs under it too (torch
  starts the autograd engine inside a torch-function handler, where modes are off, and the MoE
  dispatcher's gather/scatter allocate on ``torch.cuda.current_device()`` in backward);
* the CUDA RNG tracker (model-parallel RNG forks, activation recompute) — a tracker over the CPU generator;
* gradient clipping, which asserts ``torch.cuda.FloatTensor`` grads — a CPU version of the same math;
* the MoE router's gating matmul, which names Transformer Engine's GEMM even when TE did not import
  (``moe_router_without_te``; also needed on a GPU without TE, so the MoE spec calls it too).
* the mixed-precision optimizers (bf16 with fp32 master weights, plain and distributed), which sort
  parameters by their ``Tensor.type()`` name and accept only CUDA names — CPU tensors report the CUDA name
  of their dtype (``torch.cuda.BFloat16Tensor``), and a CUDA type name asked for as a conversion target
  converts to the CPU type of that dtype.

It also tunes the C allocator for a CPU training step (``keep_freed_memory``): not a patch, a setting;
and forks, instead of spawning, the process behind dist_checkpointing's write-results queue
(``fork_checkpoint_results_queue``).

Every monkey-patch of the project lives in this module. ``enable()`` is idempotent and a no-op when
CUDA is available, so the training loop calls it unconditionally: the loop is the same code on CPU and GPU.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

log = logging.getLogger(__name__)

# glibc mallopt(3) parameters, with glibc's defaults (a dynamic trim threshold from 128 KiB, 65,536 mmaps)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_GLIBC_DEFAULTS = {_M_MMAP_MAX: 65_536, _M_TRIM_THRESHOLD: 128 * 1024}

_ENABLED = False
_MODE: _CpuDevices | None = None


def _is_cuda(device: Any) -> bool:
    if isinstance(device, int) and not isinstance(device, bool):
        return True  # a bare int means a CUDA ordinal to torch
    if isinstance(device, (str, torch.device)):
        try:
            return torch.device(device).type == "cuda"
        except (RuntimeError, TypeError):
            return False
    return False


def _tensor_type(tensor: torch.Tensor, dtype: Any = None, *args: Any, **kwargs: Any) -> Any:
    """``Tensor.type()`` as megatron's mixed-precision optimizers check it: a CPU tensor answers with the
    CUDA type name (``torch.BFloat16Tensor`` -> ``torch.cuda.BFloat16Tensor``); a CUDA type name asked for
    as a conversion target means the CPU type of the same dtype."""
    if dtype is None and not kwargs.get("dtype"):
        name = torch.Tensor.type(tensor)
        return (
            name.replace("torch.", "torch.cuda.", 1) if tensor.device.type == "cpu" and ".cuda." not in name else name
        )
    if isinstance(dtype, str):
        dtype = dtype.replace("torch.cuda.", "torch.", 1)
    return torch.Tensor.type(tensor, dtype, *args, **kwargs)


class _CpuDevices(TorchFunctionMode):
    """Map every CUDA device argument of a torch call to the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type:
            return _tensor_type(*args, **kwargs)
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs = {**kwargs, "device": torch.device("cpu")}
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda(args[1]):
            args = (args[0], torch.device("cpu"), *args[2:])
        return func(*args, **kwargs)


class CpuRNGStatesTracker:
    """Named RNG states over the CPU generator, with the interface of megatron's CudaRNGStatesTracker."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.reset()

    def is_initialized(self) -> bool:
        return self._is_initialized

    def reset(self) -> None:
        self._is_initialized = False
        self.states_: dict[str, torch.Tensor] = {}
        self.seeds_: set[int] = set()

    def get_states(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.states_.items()}

    def set_states(self, states: dict[str, torch.Tensor]) -> None:
        self._is_initialized = True
        self.states_ = {k: v.clone() for k, v in states.items()}

    def add(self, name: str, seed: int) -> None:
        self._is_initialized = True
        if seed in self.seeds_:
            raise RuntimeError(f"seed {seed} already exists")
        if name in self.states_:
            raise RuntimeError(f"rng state {name} already exists")
        self.seeds_.add(seed)
        orig = torch.get_rng_state()
        torch.manual_seed(seed)
        self.states_[name] = torch.get_rng_state()
        torch.set_rng_state(orig)

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng"):
        if name not in self.states_:
            raise RuntimeError(f"rng state {name} is not added")
        orig = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(orig)


def _clip_grad_by_total_norm_cpu(parameters, max_norm, total_norm, use_decoupled_grad=False):
    """megatron's clip_grad_by_total_norm_fp32 without its CUDA-only assertion and kernel."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    clip_coeff = max_norm / (total_norm + 1.0e-6)
    if clip_coeff >= 1.0:
        return
    for p in parameters:
        grad = getattr(p, "decoupled_grad", None) if use_decoupled_grad else p.grad
        if grad is not None:
            grad.detach().mul_(clip_coeff)


def moe_router_without_te() -> None:
    """megatron-core 0.16's router gating checks ``te_general_gemm is not None``, a name only bound when
    Transformer Engine imports; without TE that check raises NameError. Bind it to None (the torch matmul
    path). Idempotent; does nothing where TE imported."""
    import megatron.core.transformer.moe.moe_utils as moe_utils

    if not getattr(moe_utils, "HAVE_TE", True) and not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def keep_freed_memory(keep: bool = True) -> bool:
    """Make glibc's malloc keep freed memory for reuse instead of handing it back to the kernel.

    By default every allocation over 32 MB is its own mmap, unmapped again when freed. A CPU training step
    allocates and frees the same large tensors every step (demo_tiny's 2048 x 151,936 fp32 logits, their
    softmax and gradient: 1.2 GB each), so each step faulted in and zeroed gigabytes of fresh pages:
    a third of the step was system time. Served from the heap and never trimmed, the same memory is
    reused, with bit-identical losses: a 6-step demo_tiny run took 23 s of CPU instead of 37, a step after
    the first 15-18% less (bench/bench_cpu_allocator.py, which measures against ``keep=False``: glibc's
    defaults again). The process's resident memory stays at its peak instead of falling between steps. False
    where the C library is not glibc.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    settings = {_M_MMAP_MAX: 0, _M_TRIM_THRESHOLD: 2**31 - 1} if keep else _GLIBC_DEFAULTS
    ok = [bool(mallopt(param, value)) for param, value in settings.items()]  # each one set, whatever the others
    return all(ok)


def fork_checkpoint_results_queue() -> bool:
    """Start dist_checkpointing's write-results queue in a forked manager process instead of a spawned one.

    megatron-core reports every checkpoint write through a ``multiprocessing`` Manager queue it starts with
    the spawn method (a fresh interpreter: no CUDA state copied into it). That interpreter imports torch when
    it unpickles the first write result, so the first save of every training process waited ~1.5 s of CPU
    (several seconds on a loaded machine) for nothing; a trainer launched per test, per Slurm job or per rank
    paid it each time. Forked, the manager has torch already. Only in CPU mode: there is no CUDA state to
    copy, and megatron-core forks its checkpoint writer processes from the same process anyway. Lazy like
    the original (started at the first save, or by checkpoint.shield_checkpoint_helper); False where this
    megatron-core has no such queue.
    """
    try:
        from megatron.core.dist_checkpointing.strategies import filesystem_async
    except ImportError:
        return False
    if not hasattr(filesystem_async, "_get_write_results_queue"):
        return False

    def _get_write_results_queue() -> Any:
        import multiprocessing as mp

        if filesystem_async._results_queue is None:
            filesystem_async._results_queue = mp.get_context("fork").Manager().Queue()
        return filesystem_async._results_queue

    filesystem_async._get_write_results_queue = _get_write_results_queue
    return True


def enable() -> bool:
    """Make megatron-core usable on CPU (once per process). Returns True when CPU mode is active."""
    global _ENABLED, _MODE
    if torch.cuda.is_available():
        return False
    if _ENABLED:
        return True
    import megatron.core.optimizer.clip_grads as clip_grads
    import megatron.core.optimizer.optimizer as optimizer
    import megatron.core.tensor_parallel.random as tp_random

    _MODE = _CpuDevices()
    _MODE.__enter__()  # stays active for the life of the process
    torch.cuda.current_device = lambda: 0  # an ordinal; _CpuDevices maps it to the CPU
    torch.cuda.synchronize = lambda *a, **k: None

    tp_random._CUDA_RNG_STATE_TRACKER = CpuRNGStatesTracker()
    tp_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    tp_random._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    tp_random._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)

    clip_grads.clip_grad_by_total_norm_fp32 = _clip_grad_by_total_norm_cpu
    optimizer.clip_grad_by_total_norm_fp32 = _clip_grad_by_total_norm_cpu
    moe_router_without_te()
    keep_freed_memory()
    fork_checkpoint_results_queue()
    run_backward = torch.autograd._engine_run_backward

    def _run_backward_on_cpu(*args: Any, **kwargs: Any) -> Any:
        with _CpuDevices():
            return run_backward(*args, **kwargs)

    torch.autograd._engine_run_backward = _run_backward_on_cpu
    _ENABLED = True
    log.info("CPU mode: megatron-core runs on the CPU (no CUDA device)")
    return True


def is_enabled() -> bool:
    return _ENABLED


def seed_model_parallel_rng(seed: int, tp_rank: int = 0) -> None:
    """Seed torch and megatron's tracked RNG states the way model_parallel_cuda_manual_seed does."""
    import megatron.core.tensor_parallel.random as tp_random

    torch.manual_seed(seed)
    if not _ENABLED:
        tp_random.model_parallel_cuda_manual_seed(seed, force_reset_rng=True)
        return
    tracker = tp_random._CUDA_RNG_STATE_TRACKER
    tracker.reset()
    tracker.add(tp_random._DATA_PARALLEL_RNG_TRACKER_NAME, seed)
    tracker.add(tp_random._MODEL_PARALLEL_RNG_TRACKER_NAME, seed + 2718 + tp_rank)
    tracker.add(tp_random._EXPERT_PARALLEL_RNG_TRACKER_NAME, seed + 1024)
