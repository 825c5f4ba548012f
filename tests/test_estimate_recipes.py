"""Size / FLOPs / memory estimates against megatron-core's own model, and the real-size recipes."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from recipe_helpers import train_recipe

from midtrain.config import ConfigError
from midtrain.train import distributed
from midtrain.train.estimate import GPUS, USABLE_FRACTION, flops_per_token, memory_per_gpu, summary
from midtrain.train.model import build_gpt_model
from recipes import all_recipes
from recipes.long_context import progression_stages
from recipes.models import SHAPES, abf_rotary_base

REAL = ["qwen3_1p7b_256k_h200", "qwen3_8b_256k_h200", "qwen3_32b_256k_h200", "llama31_8b_256k_h200"]
# Parameter counts of the released checkpoints (sum of tensor sizes in their safetensors).
RELEASED = {
    "qwen3_1p7b_256k_h200": 1_720_574_976,
    "qwen3_8b_256k_h200": 8_190_735_360,
    "llama31_8b_256k_h200": 8_030_261_248,
}


@pytest.fixture(scope="module")
def world_of_one():
    distributed.initialize(seed=1)
    yield
    distributed.destroy()


def _single_gpu_layout(name: str):
    # The same shape on one rank, local spec: megatron-core builds it on the meta device in ~0.1 s.
    return train_recipe(
        name,
        [
            "precision.transformer_impl=local",
            "parallel.tensor=1",
            "parallel.context=1",
            "parallel.pipeline=1",
            "parallel.sequence_parallel=false",
            "parallel.distributed_optimizer=false",
        ],
    ).validate()


@pytest.mark.parametrize("name", REAL)
def test_param_count_matches_megatron_core(world_of_one, name):
    cfg = _single_gpu_layout(name)
    with torch.device("meta"):
        model = build_gpt_model(cfg)
    named = dict(model.named_parameters())
    pc = cfg.model.param_count()
    assert pc.total == sum(p.numel() for p in named.values())
    if name in RELEASED:
        assert pc.total == RELEASED[name]
    # FLOPs count every matmul weight: all linear layers plus the logits projection (tied or not).
    linear = sum(p.numel() for k, p in named.items() if ".linear_" in k)
    assert pc.flops_params == linear + cfg.model.vocab_size * cfg.model.hidden_size
    # ... and the trainer's FLOP model (flops.py, used for MFU) counts the same parameters
    assert flops_per_token(cfg).dense == 6 * pc.flops_params


def test_flops_attention_term_and_document_masking():
    cfg = train_recipe("qwen3_8b_256k_h200")
    m, S = cfg.model, cfg.data.seq_length
    assert m.kv_channels is not None  # the recipe sets the head dim
    causal = flops_per_token(cfg)
    assert causal.attention == pytest.approx(6 * m.num_layers * m.num_attention_heads * m.kv_channels * S)
    # the reference fact: at 256K about 82% of an 8B model's FLOPs are attention
    assert 0.78 < causal.attention_fraction < 0.88
    eight_docs = flops_per_token(cfg, [S // 8] * 8)
    assert eight_docs.attention == pytest.approx(causal.attention / 8)
    assert eight_docs.dense == causal.dense
    with pytest.raises(ValueError, match="sum to"):
        flops_per_token(cfg, [10, 20])


def test_memory_estimate_responds_to_the_layout():
    base = train_recipe("qwen3_8b_256k_h200")
    mem = memory_per_gpu(base)
    pc = base.model.param_count()
    tp = base.parallel.tensor
    assert mem.weights == pytest.approx(2 * pc.total / tp)  # bf16
    assert mem.grads == pytest.approx(4 * pc.total / tp)  # fp32 grad buffer
    assert mem.optimizer == pytest.approx(12 * pc.total / tp / base.parallel.context)  # dp=1 x cp shards
    no_rc = memory_per_gpu(base.apply_overrides(["parallel.recompute=none"]))
    assert no_rc.activations > 5 * mem.activations
    more_cp = memory_per_gpu(base.apply_overrides(["parallel.context=8"]))
    assert more_cp.activations == pytest.approx(mem.activations / 2)
    assert more_cp.logits == pytest.approx(mem.logits / 2)
    no_dist = memory_per_gpu(base.apply_overrides(["parallel.distributed_optimizer=false"]))
    assert no_dist.optimizer == pytest.approx(mem.optimizer * base.parallel.context)
    fp32 = memory_per_gpu(base.apply_overrides(["precision.dtype=fp32"]))
    assert fp32.weights == pytest.approx(2 * mem.weights)
    fp8 = memory_per_gpu(base.apply_overrides(["precision.fp8=hybrid"]))
    assert fp8.weights == pytest.approx(2 * mem.weights) and any("FP8" in n for n in fp8.notes)
    pp = memory_per_gpu(base.apply_overrides(["parallel.pipeline=2"]))
    assert pp.weights < 0.6 * mem.weights


@pytest.mark.parametrize(
    "name", [n for n, r in all_recipes().items() if r.kind == "train" and ("_h100" in n or "_h200" in n)]
)
def test_every_real_recipe_fits_its_target_gpu(name):
    cfg = train_recipe(name).validate()
    target = GPUS["h100" if "_h100" in name else "h200"]
    mem = memory_per_gpu(cfg)
    assert mem.total <= USABLE_FRACTION * target.memory_bytes, summary(cfg)
    assert mem.verdict(target).startswith("fits")
    assert cfg.data.seq_length <= cfg.model.max_position_embeddings
    text = summary(cfg)
    assert "parameters" in text and "FLOPs/token" in text and "<- target" in text


@pytest.mark.parametrize("shape", ["qwen3_1p7b", "qwen3_8b", "qwen3_32b", "llama31_8b"])
def test_h100_variant_is_the_h200_recipe_plus_layout_deltas(shape):
    h200 = train_recipe(f"{shape}_256k_h200")
    h100 = train_recipe(f"{shape}_256k_h100")
    assert h100.model == h200.model and h100.optim == h200.optim and h100.data == h200.data
    assert h100.parallel != h200.parallel
    # a layout that does not fit is reported as such: the H200 layout of the 1.7B model on an H100
    assert "does not fit" in memory_per_gpu(train_recipe("qwen3_1p7b_256k_h200")).verdict(GPUS["h100"])


def test_context_extension_fields_and_progression():
    assert abf_rotary_base(500_000, 8192, 65_536) == 8_000_000  # ProLong's published value
    llama = train_recipe("llama31_8b_256k_h200")
    assert (llama.model.rope_scaling, llama.model.rope_scaling_factor) == ("llama3", 16.0)
    assert llama.model.rope_original_max_position_embeddings == 8192
    stages = progression_stages("qwen3_8b_ctx_h200")
    assert [s.data.seq_length for s in stages] == [32_768, 131_072, 262_144]
    bases = [s.model.rotary_base for s in stages]
    assert bases[0] == SHAPES["qwen3_8b"]["rotary_base"] and bases[0] < bases[1] < bases[2]
    assert stages[0].init_from == "models/Qwen3-8B-Base"
    assert [s.init_from for s in stages[1:]] == [s.run_dir for s in stages[:-1]]
    # every stage keeps the tokens per step (global batch x seq_length)
    assert len({s.optim.global_batch_size * s.data.seq_length for s in stages}) == 1
    yarn = train_recipe("qwen3_8b_256k_yarn_h200").validate()
    assert yarn.model.rope_scaling == "yarn" and yarn.model.rotary_base == 1e6


def test_rope_scaling_errors_name_the_field():
    cfg = train_recipe("qwen3_8b_256k_h200")
    with pytest.raises(ConfigError, match="rope_original_max_position_embeddings"):
        cfg.apply_overrides(["model.rope_scaling=yarn", "model.rope_scaling_factor=4.0"]).validate()
    with pytest.raises(ConfigError, match="rope_scaling_factor"):
        cfg.apply_overrides(["model.rope_scaling=yarn", "model.rope_original_max_position_embeddings=32768"]).validate()
    with pytest.raises(ConfigError, match="rope_high_freq_factor"):
        train_recipe("llama31_8b_256k_h200", ["model.rope_high_freq_factor=2.0"]).validate()
    assert dataclasses.asdict(cfg.model)["rope_scaling"] == "none"
