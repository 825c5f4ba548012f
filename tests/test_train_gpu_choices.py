"""The trainer's GPU-side decisions, held on CPU: layer implementation, TE version floor for FP8 recipes,
CUDA device choice, the pipeline schedule's activation shape with context parallelism, and the FLOPs/MFU
numbers users read."""

from __future__ import annotations

from pathlib import Path

import pytest

from midtrain.config import ConfigError
from midtrain.train.config import TrainConfig
from midtrain.train.gpu_choices import (
    TE_MIN_FOR_FP8_RECIPE,
    choose_impl,
    cpu_dtype,
    cpu_flags,
    native_bf16_cpu,
    pick_cuda_device,
    te_version_problem,
)


@pytest.mark.parametrize(
    "requested, te, dtype, expected",
    [
        ("auto", True, "bf16", "transformer_engine"),
        ("auto", True, "fp32", "local"),  # TE's packed attention kernels take bf16/fp16 only
        ("auto", False, "bf16", "local"),
        ("local", True, "bf16", "local"),
        ("transformer_engine", True, "bf16", "transformer_engine"),
    ],
)
def test_layer_implementation_choice(requested, te, dtype, expected):
    assert choose_impl(requested, te, dtype) == expected


def test_transformer_engine_is_refused_where_it_cannot_run():
    with pytest.raises(ConfigError, match="transformer_impl: transformer_engine requested"):
        choose_impl("transformer_engine", False, "bf16")
    with pytest.raises(ConfigError, match="precision.dtype: fp32 .*transformer_impl=local"):
        choose_impl("transformer_engine", True, "fp32")


def test_fp32_auto_with_context_parallel_names_the_dtype_here():
    """CPU: auto + fp32 + CP gives the local spec, whose refusal names the field."""
    from midtrain.train.model import resolve_impl

    cfg = TrainConfig().apply_overrides(["parallel.context=2", "precision.dtype=fp32", "model.num_layers=4"]).validate()
    with pytest.raises(ConfigError, match="parallel.context: needs Transformer Engine"):
        resolve_impl(cfg)


@pytest.mark.parametrize(
    "recipe, version, ok",
    [
        ("tensorwise", "2.1.0", False),
        ("tensorwise", "2.2.0", True),
        ("tensorwise", "2.2.0.dev0+abc", True),
        ("blockwise", "2.2.1", False),
        ("blockwise", "2.3.0", True),
        ("blockwise", "2.8.0+cu12", True),
        ("delayed", "2.0.0", False),
        ("delayed", "2.1.0", True),
        ("mxfp8", "2.4.0", True),
    ],
)
def test_fp8_recipe_needs_its_transformer_engine(recipe, version, ok):
    problem = te_version_problem("hybrid", recipe, version)
    assert (problem is None) == ok, problem
    if problem is not None:
        assert problem.startswith("precision.fp8_recipe: ") and version in problem
        assert TE_MIN_FOR_FP8_RECIPE[recipe] in problem
    assert te_version_problem("none", recipe, "1.0") is None  # no FP8: any TE


def test_fp8_refusal_suggests_what_this_te_can_do():
    assert "fp8_recipe=delayed" in (te_version_problem("e4m3", "tensorwise", "2.1.3") or "")
    assert "precision.fp8=none" in (te_version_problem("e4m3", "tensorwise", "2.0.0") or "")


def test_gpu_extra_pins_the_newest_fp8_floor_within_megatron_cores_range():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    pin = re.search(r'"transformer-engine\[pytorch\]>=([\d.]+),<([\d.]+)"', text)
    assert pin, "no transformer-engine[pytorch] range in pyproject.toml"
    floor, ceiling = pin.groups()
    newest = max(TE_MIN_FOR_FP8_RECIPE.values(), key=lambda v: tuple(map(int, v.split("."))))
    assert tuple(map(int, floor.split("."))) >= tuple(map(int, newest.split(".")))
    # megatron-core 0.16.1's own range (its package metadata, extra "dev": transformer-engine>=2.9.0a0,<2.12.0)
    assert (floor, ceiling) == ("2.9", "2.12")


@pytest.mark.parametrize(
    "local_rank, visible, device",
    [
        (0, 8, 0),
        (5, 8, 5),  # torchrun / srun with the node's GPUs visible to every task
        (3, 1, 0),
        (7, 1, 0),  # --gpus-per-task=1 / --gpu-bind: each task sees only its own GPU
        (5, 4, 1),  # a socket's 4 GPUs visible to local ranks 4-7
    ],
)
def test_cuda_device_is_picked_among_the_visible_ones(local_rank, visible, device):
    assert pick_cuda_device(local_rank, visible) == device


def test_no_visible_cuda_device_is_a_message():
    with pytest.raises(RuntimeError, match="CUDA_VISIBLE_DEVICES"):
        pick_cuda_device(0, 0)


class _Group:
    def __init__(self, n: int) -> None:
        self.n = n

    def size(self) -> int:
        return self.n


@pytest.mark.parametrize("cp, tp, sp", [(1, 1, False), (2, 1, False), (4, 2, True), (8, 1, False)])
def test_pipeline_activations_are_this_ranks_share_of_the_sequence(cp, tp, sp):
    """megatron's pipeline schedule sizes the tensors between stages from the seq_length the trainer passes:
    they must be this rank's tokens (S/CP, /TP with sequence parallelism), not S/CP²."""
    from megatron.core.pipeline_parallel.schedules import get_tensor_shapes

    from midtrain.train.trainer import schedule_seq_length

    cfg = (
        TrainConfig()
        .apply_overrides(
            [
                f"parallel.context={cp}",
                f"parallel.tensor={tp}",
                f"parallel.sequence_parallel={str(sp).lower()}",
                "data.seq_length=4096",
                "model.num_layers=4",
                "parallel.pipeline=2",
                "model.num_attention_heads=8",
                "model.num_query_groups=2",
                "model.hidden_size=128",
            ]
        )
        .validate()
    )
    tc = type("TC", (), {"sequence_parallel": sp, "hidden_size": 128})()
    shapes = get_tensor_shapes(
        seq_length=schedule_seq_length(cfg),
        micro_batch_size=1,
        decoder_seq_length=None,
        config=tc,
        tp_group=_Group(tp),
        cp_group=_Group(cp),
    )
    local_tokens = 4096 // cp // (tp if sp else 1)
    assert shapes == [(local_tokens, 1, 128)]


def test_mfu_is_against_the_bf16_peak_and_fp8_is_labelled():
    from midtrain.train.flops import bf16_peak_for, fp8_peak_tflops

    assert bf16_peak_for("NVIDIA H200") == 989.0
    assert bf16_peak_for("NVIDIA H100 80GB HBM3") == 989.0
    assert bf16_peak_for("Some Unknown GPU") is None
    fp8 = TrainConfig().apply_overrides(["precision.fp8=hybrid", "model.num_layers=4"]).validate()
    assert fp8_peak_tflops(fp8, 989.0) == 1978.0
    assert fp8_peak_tflops(TrainConfig(), 989.0) is None


def test_attention_flops_add_up_over_ranks():
    """Σl² of the global batch is the sum over ranks' documents, not one rank's times the DP size."""
    from midtrain.train.flops import flops_from_sums, step_flops

    cfg = (
        TrainConfig()
        .apply_overrides(["model.vocab_size=256", "model.max_position_embeddings=65536", "data.seq_length=32768"])
        .validate()
    )
    rank0, rank1 = [[32768]], [[4096] * 8]  # one long document vs eight short ones
    together = step_flops(cfg, rank0 + rank1)
    summed = flops_from_sums(cfg, 2 * 32768, 32768**2 + 8 * 4096**2)
    assert together == pytest.approx(summed)
    assert 2 * step_flops(cfg, rank0) > 1.2 * together  # the old estimate from rank 0 alone overcounts


def test_fusions_are_off_on_cpu_and_on_where_megatron_has_them():
    from midtrain.train.gpu_choices import fusion_flags

    cpu = fusion_flags("local", cuda=False, rope_scaling="none", apex_wgrad=True)
    assert not any(v for k, v in cpu.items() if k != "cross_entropy_fusion_impl")
    te = fusion_flags("transformer_engine", cuda=True, rope_scaling="none", apex_wgrad=True)
    assert te["bias_activation_fusion"] and te["cross_entropy_loss_fusion"] and te["apply_rope_fusion"]
    assert te["cross_entropy_fusion_impl"] == "te" and te["gradient_accumulation_fusion"]
    assert not fusion_flags("transformer_engine", True, "yarn", True)["apply_rope_fusion"]  # YaRN's mscale
    assert not fusion_flags("transformer_engine", True, "none", False)["gradient_accumulation_fusion"]
    portable = fusion_flags("local", cuda=True, rope_scaling="none", apex_wgrad=True)
    assert portable["bias_activation_fusion"] and portable["cross_entropy_loss_fusion"]
    assert portable["cross_entropy_fusion_impl"] == "native"
    assert not portable["apply_rope_fusion"] and not portable["gradient_accumulation_fusion"]  # TE-only


def test_gpu_fusion_flags_make_a_valid_transformer_config():
    """megatron-core's own TransformerConfig checks accept the CUDA flags for the SwiGLU model (no TE
    needed to construct the config)."""
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    from midtrain.train.gpu_choices import fusion_flags

    for impl in ("local", "transformer_engine"):
        flags = fusion_flags(impl, cuda=True, rope_scaling="none", apex_wgrad=False)
        flags.pop("apply_rope_fusion")  # its check imports TE's fused RoPE
        TransformerConfig(
            num_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            gated_linear_unit=True,
            activation_func=F.silu,
            add_bias_linear=False,
            **flags,
        )


def test_distributed_optimizer_overlaps_communication():
    from midtrain.train.trainer import ddp_config

    on = ddp_config(TrainConfig().apply_overrides(["parallel.distributed_optimizer=true"]).validate())
    assert on.use_distributed_optimizer and on.overlap_grad_reduce and on.overlap_param_gather
    assert on.grad_reduce_in_fp32
    off = ddp_config(TrainConfig().validate())
    assert not off.use_distributed_optimizer and not off.overlap_param_gather


def test_without_torch_compile_the_jit_fusions_stay_off():
    from midtrain.train.gpu_choices import fusion_flags

    portable = fusion_flags("local", cuda=True, rope_scaling="none", apex_wgrad=False, jit_ok=False)
    assert not portable["bias_activation_fusion"] and not portable["cross_entropy_loss_fusion"]
    te = fusion_flags("transformer_engine", cuda=True, rope_scaling="none", apex_wgrad=False, jit_ok=False)
    assert te["cross_entropy_loss_fusion"] and te["apply_rope_fusion"]  # TE's own kernels
    assert not te["bias_activation_fusion"]


def test_moe_permute_fusion_with_transformer_engine_2_1_or_newer():
    from midtrain.train.gpu_choices import moe_permute_fusion

    assert moe_permute_fusion("transformer_engine", True, "2.10.0")
    assert moe_permute_fusion("transformer_engine", True, "2.1.0.dev0+abc")
    assert not moe_permute_fusion("transformer_engine", True, "2.0.0")
    assert not moe_permute_fusion("transformer_engine", False, "2.10.0")  # no CUDA: no TE kernels
    assert not moe_permute_fusion("local", True, "2.10.0")
    assert not moe_permute_fusion("transformer_engine", True, None)


def test_selective_recompute_picks_modules_that_save_memory_with_te():
    """megatron's default selective recompute (core attention) saves nothing with TE's fused attention."""
    from midtrain.train.model import build_transformer_config

    dense = TrainConfig().apply_overrides(["parallel.recompute=selective", "model.num_layers=4"]).validate()
    assert build_transformer_config(dense, "transformer_engine", on_cpu=True).recompute_modules == ["mlp"]
    assert build_transformer_config(dense, "local", on_cpu=True).recompute_modules == ["core_attn"]
    moe = dense.apply_overrides(["model.num_experts=4", "model.moe_ffn_hidden_size=32"]).validate()
    assert build_transformer_config(moe, "transformer_engine", on_cpu=True).recompute_modules == ["moe_act"]
    ungrouped = moe.apply_overrides(["model.moe_grouped_gemm=false"]).validate()
    assert build_transformer_config(ungrouped, "transformer_engine", on_cpu=True).recompute_modules == ["moe"]


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["data.seq_length=4100"], "data.seq_length"),  # not a multiple of 8 tokens
        (["parallel.context=2", "data.seq_length=4104"], "data.seq_length"),  # 2052 tokens per CP rank
        (["model.hidden_size=72", "model.kv_channels=18"], "model.hidden_size"),  # not a multiple of 16
        # the weights TE asserts on (transformer_engine.pytorch.utils.assert_dim_for_fp8_exec)
        (["model.ffn_hidden_size=200"], "model.ffn_hidden_size"),  # fc2's input width
        (["parallel.tensor=2", "model.ffn_hidden_size=208"], "model.ffn_hidden_size"),  # 104 per TP rank
        (["model.kv_channels=10"], "model.num_attention_heads"),  # proj's input width: 4 x 10
        (
            ["model.num_attention_heads=8", "model.num_query_groups=1", "model.kv_channels=2"],
            "model.num_query_groups",
        ),  # the fused QKV's width: (8 + 2) x 2
        (
            ["model.num_experts=4", "model.moe_ffn_hidden_size=40", "model.ffn_hidden_size=200"],
            "model.moe_ffn_hidden_size",
        ),  # an MoE model's MLPs are its experts (the unused dense width is not checked)
    ],
)
def test_fp8_shape_rules_are_checked_in_validate(overrides, field):
    base = ["precision.fp8=hybrid", "model.num_layers=4", "model.max_position_embeddings=8192"]
    TrainConfig().apply_overrides([*base, "data.seq_length=4096"]).validate()  # a shape FP8 takes
    with pytest.raises(ConfigError, match=rf"^{field}: .*(multiple of 8|multiple of 16)"):
        TrainConfig().apply_overrides([*base, *overrides]).validate()
    TrainConfig().apply_overrides(
        [*overrides, "model.num_layers=4", "model.max_position_embeddings=8192"]
    ).validate()  # without FP8 the same shape is fine


def test_a_cpu_recipe_trains_bf16_only_where_the_cpu_computes_it(tmp_path):
    """bf16 on a CPU without AMX or AVX512-BF16 is emulated (a SmolLM2-135M step: 182 s against ~6 s in fp32 on
    an AVX2 EPYC): the flags decide; this machine's own /proc/cpuinfo is read as the recipes read it."""
    amd = "flags\t\t: fpu vme sse sse2 ssse3 fma avx avx2 bmi2 sha_ni\n"  # an AVX2 EPYC (this machine's kind)
    sapphire = "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"  # Intel with AMX
    for text, native in ((amd, False), (sapphire, True), ("processor\t: 0\n", False)):
        info = tmp_path / "cpuinfo"
        info.write_text("processor\t: 0\nvendor_id\t: x\n" + text)
        assert native_bf16_cpu(cpu_flags(info)) is native
    assert cpu_flags(tmp_path / "absent") == set()  # another system: fp32, never an emulated bf16
    here = Path("/proc/cpuinfo")
    if here.exists():
        assert cpu_dtype() == ("bf16" if {"amx_bf16", "avx512_bf16"} & cpu_flags(here) else "fp32")
