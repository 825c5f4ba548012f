"""Decisions the trainer makes about the GPU side, as pure functions (the CPU suite tests each one).

* which layer implementation a recipe gets (Transformer Engine or the local spec with portable attention);
* whether the installed Transformer Engine can build the recipe's FP8 scaling recipe;
* which CUDA device this process uses when a launcher or the site decides what it can see;
* whether this machine's CPU computes bf16 itself (a CPU recipe's precision).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from midtrain.config import ConfigError

# CPU flags (/proc/cpuinfo) of native bf16 matmuls: Intel AMX, AVX512-BF16. Without them torch emulates bf16 on the
# CPU: one 512-token step of SmolLM2-135M took 182 s in bf16 against about 6 s in fp32 on a 2-core AVX2 EPYC, where
# with AMX bf16 was 1.86x faster than fp32.
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")

# Oldest Transformer Engine for which megatron-core 0.16 builds each FP8 scaling recipe
# (megatron/core/fp8_utils.py: delayed and mxfp8 need >= 2.1, tensorwise >= 2.2, blockwise >= 2.3; an older
# TE makes it raise a generic error at the first forward). pyproject's `gpu` extra pins the newest floor.
TE_MIN_FOR_FP8_RECIPE = {"delayed": "2.1", "tensorwise": "2.2", "blockwise": "2.3", "mxfp8": "2.1"}


def choose_impl(requested: str, te_available: bool, dtype: str) -> str:
    """'transformer_engine' or 'local' for a recipe's precision.transformer_impl on this machine.

    ``auto`` takes TE only where it imports and the recipe trains in bf16: TE's packed (THD) attention
    kernels take bf16/fp16 only, so an fp32 run gets the portable path.
    """
    if requested == "auto":
        return "transformer_engine" if te_available and dtype != "fp32" else "local"
    if requested == "transformer_engine":
        if not te_available:
            raise ConfigError(
                "precision.transformer_impl: transformer_engine requested but Transformer Engine "
                "does not import here (needs a CUDA GPU and the `gpu` extra)"
            )
        if dtype == "fp32":
            raise ConfigError(
                "precision.dtype: fp32 with transformer_impl=transformer_engine: TE's packed "
                "(THD) attention kernels need bf16; set precision.dtype=bf16, or "
                "precision.transformer_impl=local for fp32"
            )
    return requested


def te_version_problem(fp8: str, fp8_recipe: str, te_version: str | None) -> str | None:
    """Why the installed TE cannot run the recipe's FP8 (a message naming the field), else None."""
    if fp8 == "none" or te_version is None:
        return None
    from packaging.version import Version

    have = Version(te_version)
    need = TE_MIN_FOR_FP8_RECIPE.get(fp8_recipe)
    # a development build of the floor version (2.2.0.dev0+...) counts, as megatron-core counts it
    if need is None or have >= Version(f"{need}.0.dev0"):
        return None
    usable = [r for r, v in TE_MIN_FOR_FP8_RECIPE.items() if have >= Version(f"{v}.0.dev0") and r != "mxfp8"]
    instead = f"precision.fp8_recipe={' or '.join(usable)}" if usable else "precision.fp8=none"
    return (
        f"precision.fp8_recipe: {fp8_recipe} needs Transformer Engine >= {need} (megatron-core builds that "
        f"recipe only from there); this environment has {te_version}: upgrade TE or set {instead}"
    )


# The megatron-core and Transformer Engine releases the GPU path is written for (pyproject's pins, checked
# by tests/test_gpu_pins.py): every megatron-core name midtrain imports exists in them (core_v0.18 removed
# megatron.core.utils.get_thd_batch_on_this_cp_rank, which every context-parallel batch goes through), and
# the TE range is the one megatron-core 0.16.1 itself requires. constraints-gpu.txt pins the tested pair.
MEGATRON_CORE_RANGE = ">=0.16.1,<0.18"
TE_RANGE = ">=2.9,<2.12"


def installed_version(dist: str) -> str | None:
    """An installed distribution's version (package metadata, nothing imported); None when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def stack_version_problem(megatron_core: str | None, transformer_engine: str | None) -> str | None:
    """Why the installed megatron-core / TE (versions, None = not installed) are outside the supported
    ranges (a one-line message naming the package, its version and the range), else None."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    for name, have, wanted, extra in (
        ("megatron-core", megatron_core, MEGATRON_CORE_RANGE, ""),
        ("transformer-engine", transformer_engine, TE_RANGE, "[pytorch]"),
    ):
        if have is not None and not SpecifierSet(wanted).contains(Version(have), prereleases=True):
            return (
                f"{name} {have} is installed; midtrain supports {name}{wanted} (constraints-gpu.txt pins the "
                f"tested versions): pip install '{name}{extra}{wanted}'"
            )
    return None


def installed_te_version() -> str | None:
    """The installed Transformer Engine's version string (package metadata; TE itself is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("transformer-engine", "transformer_engine", "transformer-engine-torch"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def pick_cuda_device(local_rank: int, visible_devices: int) -> int:
    """The CUDA ordinal for this process among the devices it can see.

    torchrun, or srun with every GPU of the node visible to every task: one device per local rank. A site
    that binds GPUs to tasks (``--gpus-per-task``, ``--gpu-bind``) shows each task only its own: one visible
    device is device 0; with a socket's worth visible per group of tasks, local ranks wrap around them.
    """
    if visible_devices < 1:
        raise RuntimeError(
            "no CUDA device visible to this process (check CUDA_VISIBLE_DEVICES and the job's GPU request)"
        )
    return local_rank % visible_devices


def fusion_flags(impl: str, cuda: bool, rope_scaling: str, apex_wgrad: bool, jit_ok: bool = True) -> dict[str, object]:
    """megatron-core fusion settings of the TransformerConfig for this machine and layer implementation.

    CPU (tests, the demo) keeps every fusion off: the fused paths are CUDA kernels or torch.compile'd ones.
    On CUDA: SwiGLU (bias-activation) and bias-dropout-add fusions, the fused cross-entropy (Transformer
    Engine's with TE layers, megatron's own otherwise: neither materialises a second fp32 copy of the
    logits); with TE layers also fused RoPE — except YaRN, whose attention scale the fused packed path
    drops — and gradient-accumulation fusion where megatron's output layer finds its CUDA extension
    (``fused_weight_gradient_mlp_cuda``; without it megatron-core refuses the flag). megatron compiles its
    SwiGLU, bias-dropout and native cross-entropy fusions with torch.compile: ``jit_ok`` False (a machine
    where torch.compile cannot build kernels) keeps those off.
    """
    te = impl == "transformer_engine"
    jit = cuda and jit_ok
    flags: dict[str, object] = dict(
        bias_activation_fusion=jit,
        bias_dropout_fusion=jit,
        cross_entropy_loss_fusion=cuda and (te or jit_ok),
        cross_entropy_fusion_impl="te" if te else "native",
        apply_rope_fusion=cuda and te and rope_scaling != "yarn",
        gradient_accumulation_fusion=cuda and te and apex_wgrad,
        masked_softmax_fusion=False,  # neither attention path uses megatron's unfused softmax
        persist_layer_norm=False,
    )
    return flags


# Transformer Engine's fused MoE token permutation (megatron's moe_permute_fusion) exists from TE 2.1.
TE_MIN_FOR_PERMUTE_FUSION = "2.1"


def moe_permute_fusion(impl: str, cuda: bool, te_version: str | None) -> bool:
    """Whether the MoE token dispatcher fuses its permute/unpermute (TE's kernels): TE layers on CUDA, TE >= 2.1."""
    if impl != "transformer_engine" or not cuda or te_version is None:
        return False
    from packaging.version import Version

    return Version(te_version) >= Version(f"{TE_MIN_FOR_PERMUTE_FUSION}.0.dev0")


def selective_recompute_modules(impl: str, is_moe: bool, grouped_gemm: bool, fp8_delayed: bool) -> list[str]:
    """megatron's ``recompute_modules`` for ``parallel.recompute=selective``: modules whose recompute saves memory.

    megatron's default, core attention, saves nothing with TE: its fused attention keeps no score matrix
    (megatron warns so). With TE layers: the dense MLP (fc1's output and the SwiGLU, the largest activations of
    a layer), or for MoE the experts' activation function (``moe_act``, grouped GEMM only; not with delayed FP8
    scaling, which megatron refuses), else the whole MoE layer. The local spec keeps core attention: the
    portable attention's per-document score matrices are what recompute frees there.
    """
    if impl != "transformer_engine":
        return ["core_attn"]
    if not is_moe:
        return ["mlp"]
    return ["moe_act"] if grouped_gemm and not fp8_delayed else ["moe"]


def apex_wgrad_available() -> bool:
    """Whether megatron's linear layers can fuse weight-gradient accumulation (apex's CUDA extension)."""
    from importlib.util import find_spec

    return find_spec("fused_weight_gradient_mlp_cuda") is not None


_JIT_OK: bool | None = None


def jit_fusions_work() -> bool:
    """Whether torch.compile builds a CUDA kernel here (megatron's jit fusions need it); tried once per process.

    A bare machine may lack the C compiler or Python headers Triton needs; then the run keeps the plain
    kernels and says so, instead of failing at the first fused op.
    """
    global _JIT_OK
    if _JIT_OK is None:
        import logging

        import torch

        try:
            f = torch.compile(lambda x: torch.nn.functional.silu(x) * x)
            f(torch.ones(8, device="cuda"))
            _JIT_OK = True
        except Exception as e:  # noqa: BLE001 - any compile failure: run without the jit fusions
            logging.getLogger(__name__).warning(
                "torch.compile does not work here (%s: %s); megatron's SwiGLU/bias-dropout/cross-entropy "
                "fusions stay off",
                type(e).__name__,
                str(e).splitlines()[0] if str(e) else "",
            )
            _JIT_OK = False
    return _JIT_OK


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The first CPU's feature flags (Linux); empty where the file is not there (other systems)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags") and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


def native_bf16_cpu(flags: set[str] | None = None) -> bool:
    """Whether the CPU computes bf16 matmuls itself (AMX or AVX512-BF16): where not, bf16 on the CPU is emulated
    and many times slower than fp32 (see NATIVE_BF16_FLAGS)."""
    return bool((cpu_flags() if flags is None else flags) & set(NATIVE_BF16_FLAGS))


def cpu_dtype() -> Literal["bf16", "fp32"]:
    """The precision a CPU recipe trains in here: bf16 where the CPU computes it natively, else fp32."""
    return "bf16" if native_bf16_cpu() else "fp32"
