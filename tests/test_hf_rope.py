"""Context extension: every real recipe's RoPE, as megatron-core trains it and as the exported Hugging Face
config makes transformers compute it, is the same rotation (inverse frequencies and YaRN's attention factor)."""

from __future__ import annotations

import pytest
import torch
from recipe_helpers import train_recipe

from midtrain.config import ConfigError
from midtrain.train import cpu_mode, hf_mapping, hf_rope
from recipes import all_recipes

REAL = sorted(n for n, r in all_recipes().items() if r.kind == "train" and ("_h100" in n or "_h200" in n))


def _megatron_inv_freq(m) -> tuple[torch.Tensor, float]:
    """(inverse frequencies, cos/sin scale) of the rotary module GPTModel builds for these kwargs."""
    from megatron.core.models.common.embeddings import YarnRotaryEmbedding
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    cpu_mode.enable()  # megatron moves inv_freq to the current CUDA device
    kw = hf_rope.gpt_model_kwargs(m)
    dim = m.kv_channels
    if kw["position_embedding_type"] == "yarn":
        a = hf_rope.transformer_config_attrs(m)
        rot = YarnRotaryEmbedding(
            kv_channels=dim,
            rotary_base=kw["rotary_base"],
            use_cpu_initialization=True,
            scaling_factor=a["yarn_rotary_scaling_factor"],
            original_max_position_embeddings=a["yarn_original_max_position_embeddings"],
            beta_fast=a["yarn_beta_fast"],
            beta_slow=a["yarn_beta_slow"],
            mscale=a["yarn_mscale"],
            mscale_all_dim=a["yarn_mscale_all_dim"],
        )
        emb, mscale = rot.get_emb(2)
        return emb[1, 0, 0, : dim // 2].float(), float(mscale)  # position 1's angles = inv_freq
    rot = RotaryEmbedding(
        kv_channels=dim,
        rotary_percent=1.0,
        rotary_base=kw["rotary_base"],
        rope_scaling=kw.get("rope_scaling", False),
        rope_scaling_factor=kw.get("rope_scaling_factor", 8.0),
        use_cpu_initialization=True,
    )
    return rot.inv_freq.float(), 1.0


def _hf_inv_freq(m) -> tuple[torch.Tensor, float]:
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    d = hf_mapping.hf_config_dict(m)
    cfg = AutoConfig.for_model(d.pop("model_type"), **d)
    rope_type = cfg.rope_parameters["rope_type"]
    if rope_type == "default":
        base = cfg.rope_parameters["rope_theta"]
        return 1.0 / (base ** (torch.arange(0, m.kv_channels, 2, dtype=torch.float) / m.kv_channels)), 1.0
    inv, scale = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu")
    return inv.float(), float(scale)


@pytest.mark.parametrize("name", REAL)
def test_recipe_rope_is_the_same_in_megatron_and_in_the_exported_hf_config(name):
    m = train_recipe(name).model
    ours, our_scale = _megatron_inv_freq(m)
    theirs, their_scale = _hf_inv_freq(m)
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=0)
    assert our_scale == pytest.approx(their_scale, rel=1e-6)
    d = hf_mapping.hf_config_dict(m)
    assert d["max_position_embeddings"] == m.max_position_embeddings >= train_recipe(name).data.seq_length
    assert d["rope_theta"] == m.rotary_base  # the legacy key engines read


def test_the_three_extension_methods_really_differ():
    base = train_recipe("qwen3_8b_ctx_stage1_32k_h200").model
    abf = train_recipe("qwen3_8b_ctx_stage3_256k_h200").model
    yarn = train_recipe("qwen3_8b_256k_yarn_h200").model
    llama = train_recipe("llama31_8b_256k_h200").model
    f0, f_abf, f_yarn = (_megatron_inv_freq(x)[0] for x in (base, abf, yarn))
    assert f0[0] == f_abf[0] == f_yarn[0] == 1.0  # the fastest rotation is never changed
    assert (f_abf[1:] < f0[1:]).all()  # a larger base slows every other frequency
    assert torch.equal(f_yarn[:4], f0[:4]) and (f_yarn[-4:] < f0[-4:]).all()  # YaRN: only the slow ones
    assert _megatron_inv_freq(yarn)[1] == pytest.approx(0.1 * torch.log(torch.tensor(8.0)).item() + 1)
    assert hf_mapping.hf_config_dict(llama)["rope_scaling"]["factor"] == 16.0


@pytest.mark.parametrize(
    "params",
    [
        {"rope_type": "default", "rope_theta": 1e6},
        {
            "rope_type": "yarn",
            "rope_theta": 1e6,
            "factor": 4.0,
            "original_max_position_embeddings": 32768,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
        },
        {
            "rope_type": "llama3",
            "rope_theta": 5e5,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ],
)
def test_hf_rope_parameters_round_trip(params):
    from midtrain.train.config import ModelConfig

    m = ModelConfig(max_position_embeddings=131_072, **hf_rope.from_hf_rope_parameters(params))
    m.validate()
    assert hf_rope.to_hf_rope_parameters(m) == params


def test_unsupported_rope_is_refused():
    with pytest.raises(ConfigError, match="attention_factor"):
        hf_rope.from_hf_rope_parameters(
            {
                "rope_type": "yarn",
                "rope_theta": 1e6,
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "attention_factor": 0.8,
            }
        )
    with pytest.raises(ConfigError, match="partial_rotary_factor"):
        hf_rope.from_hf_rope_parameters({"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5})
