"""Process group setup: torchrun / srun environment -> torch.distributed + megatron parallel_state.

Reads RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, falling back to SLURM_PROCID/SLURM_NTASKS/
SLURM_LOCALID (the sbatch script exports MASTER_ADDR/PORT). A plain single process (no launcher) gets a
world of one on a free local port. NCCL on GPUs, gloo on CPU. The CUDA device is picked among those the
process can see (a site that binds GPUs per task shows each task only its own).
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

from midtrain.formats.outputs import die_with_parent
from midtrain.train import cpu_mode
from midtrain.train.gpu_choices import pick_cuda_device

log = logging.getLogger(__name__)


PIPELINE_SEED_OFFSET = 100  # megatron/training/initialize.py _set_random_seed: seed + 100 * pp_rank


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_env(environ: dict[str, str] | None = None) -> DistEnv:
    """This process's rank and world from torchrun's variables, else Slurm's, else a world of one."""
    env = os.environ if environ is None else environ

    def pick(*names: str) -> str | None:
        return next((env[n] for n in names if env.get(n) not in (None, "")), None)

    rank = pick("RANK", "SLURM_PROCID")
    world = pick("WORLD_SIZE", "SLURM_NTASKS")
    local = pick("LOCAL_RANK", "SLURM_LOCALID")
    addr = env.get("MASTER_ADDR", "127.0.0.1")
    port = env.get("MASTER_PORT")
    if world is None or int(world) == 1:
        return DistEnv(0, 1, 0, addr, int(port) if port else 0)
    if port is None:
        raise RuntimeError(
            "distributed launch without MASTER_PORT: export MASTER_ADDR and MASTER_PORT "
            "(torchrun sets them; the sbatch template exports them for srun)"
        )
    return DistEnv(int(rank or 0), int(world), int(local or 0), addr, int(port))


def initialize(
    tensor: int = 1,
    pipeline: int = 1,
    context: int = 1,
    seed: int = 1234,
    timeout_minutes: int = 30,
    expert: int = 1,
    expert_tensor: int | None = None,
) -> DistEnv:
    """Initialise torch.distributed (if needed) and megatron's model-parallel groups; seed RNGs.

    ``expert``/``expert_tensor``: MoE expert-parallel and expert-tensor-parallel sizes (None = tensor)."""
    from megatron.core import parallel_state

    cpu_mode.enable()
    env = read_env()
    if os.environ.get("TORCHELASTIC_RUN_ID"):  # a torchrun worker: it ends with its agent, even on a kill -9 of
        die_with_parent()  # torchrun (its ranks trained on, fenced but alive, holding a GPU a requeue needs)
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if torch.cuda.is_available():
            device = pick_cuda_device(env.local_rank, torch.cuda.device_count())
            torch.cuda.set_device(device)
            log.debug(
                "rank %d (local %d): CUDA device %d of %d visible",
                env.rank,
                env.local_rank,
                device,
                torch.cuda.device_count(),
            )
        port = env.master_port or _free_port()
        dist.init_process_group(
            backend=backend,
            init_method=f"tcp://{env.master_addr}:{port}",
            rank=env.rank,
            world_size=env.world_size,
            timeout=datetime.timedelta(minutes=timeout_minutes),
        )
    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tensor,
        pipeline_model_parallel_size=pipeline,
        context_parallel_size=context,
        expert_model_parallel_size=expert,
        expert_tensor_parallel_size=expert_tensor,
    )
    # Each pipeline stage gets its own seed, as megatron's training loop offsets it (100 x pipeline rank):
    # otherwise every stage draws the same initial values for its (different) layers.
    stage_seed = seed + PIPELINE_SEED_OFFSET * parallel_state.get_pipeline_model_parallel_rank()
    cpu_mode.seed_model_parallel_rng(stage_seed, parallel_state.get_tensor_model_parallel_rank())
    return env


def destroy() -> None:
    """Tear down megatron's groups and the default process group (tests run several in one process)."""
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()
