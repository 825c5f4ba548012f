"""Qwen3-MoE <-> megatron-core: logits parity with transformers' Qwen3MoeForCausalLM, exact round trip."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hf_helpers import hf_logits, make_hf_model, tokens

from midtrain.cli import main as cli_main
from midtrain.config import ConfigError
from midtrain.train import distributed, families, hf_mapping
from midtrain.train.config import TrainConfig
from midtrain.train.hf_import import load_hf_into, load_hf_state_dict, model_config_from_hf
from midtrain.train.model import build_gpt_model


@pytest.fixture
def world_of_one():
    distributed.initialize(seed=1)
    yield
    distributed.destroy()


def _megatron_from_hf(path: Path) -> torch.nn.Module:
    cfg = TrainConfig(model=model_config_from_hf(path))
    cfg.precision.dtype = "fp32"
    cfg.precision.transformer_impl = "local"
    cfg.data.seq_length = 64
    model = build_gpt_model(cfg.validate()).eval()
    load_hf_into(model, path, cfg.model)
    return model


def _mc_logits(model: torch.nn.Module, toks: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(toks, torch.arange(toks.shape[1])[None], attention_mask=None)


@pytest.mark.parametrize("norm_topk", [True, False])
def test_moe_logits_match_transformers(world_of_one, tmp_path, norm_topk):
    src = make_hf_model("qwen3_moe", tmp_path / "hf", norm_topk_prob=norm_topk)
    m = model_config_from_hf(src)
    assert (m.num_experts, m.moe_ffn_hidden_size, m.moe_router_topk, m.moe_router_topk_norm) == (4, 32, 2, norm_topk)
    assert m.moe_aux_loss_coeff == 0.01 and not m.tie_embeddings
    model = _megatron_from_hf(src)
    toks = tokens(48)
    ref = hf_logits(src, toks)
    ours = _mc_logits(model, toks)
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max().item() < 1e-5
    assert ref.abs().max().item() > 0.5


def test_swapped_experts_are_caught_by_the_parity_test(world_of_one, tmp_path, monkeypatch):
    """Negative control: the parity test sees an expert mix-up (experts 0 and 1 exchanged)."""
    src = make_hf_model("qwen3_moe", tmp_path / "hf")
    qwen3 = families.family("qwen3")
    assert qwen3.moe is not None
    real = qwen3.moe.rows

    def swapped(n: int):
        rows = real(n)
        return [
            (
                mc.replace("local_experts.0.", "local_experts.X.")
                .replace("local_experts.1.", "local_experts.0.")
                .replace("local_experts.X.", "local_experts.1."),
                hf,
                how,
            )
            for mc, hf, how in rows
        ]

    monkeypatch.setitem(families.FAMILIES, "qwen3", replace(qwen3, moe=replace(qwen3.moe, rows=swapped)))
    toks = tokens(16)
    assert (_mc_logits(_megatron_from_hf(src), toks) - hf_logits(src, toks)).abs().max().item() > 1e-3


@pytest.mark.slow
def test_moe_round_trip_is_exact_and_loads_in_transformers(tmp_path):
    from transformers import AutoModelForCausalLM

    src = make_hf_model("qwen3_moe", tmp_path / "hf")
    mc, back = tmp_path / "mc", tmp_path / "back"
    assert cli_main(["convert", "hf2mcore", str(src), str(mc)]) == 0
    run_cfg = TrainConfig.from_yaml(mc / "config.yaml")
    assert run_cfg.model == model_config_from_hf(src) and run_cfg.model.num_experts == 4
    assert cli_main(["convert", "mcore2hf", str(mc), str(back)]) == 0
    a, b = load_hf_state_dict(src), load_hf_state_dict(back)
    assert sorted(a.keys()) == sorted(b.keys())
    assert any(".mlp.experts.3.down_proj." in k for k in a.keys()) and any(".mlp.gate." in k for k in a.keys())
    assert all(torch.equal(a[k], b[k]) for k in a.keys())
    exported = json.loads((back / "config.json").read_text())
    assert exported["model_type"] == "qwen3_moe" and exported["architectures"] == ["Qwen3MoeForCausalLM"]
    assert (exported["num_experts"], exported["moe_intermediate_size"], exported["num_experts_per_tok"]) == (4, 32, 2)
    assert exported["norm_topk_prob"] is True and exported["router_aux_loss_coef"] == 0.01
    assert type(AutoModelForCausalLM.from_pretrained(back)).__name__ == "Qwen3MoeForCausalLM"
    toks = tokens(32)
    assert torch.equal(hf_logits(src, toks), hf_logits(back, toks))


def test_moe_configs_the_tables_cannot_hold_are_refused(tmp_path):
    src = make_hf_model("qwen3_moe", tmp_path / "hf")
    cfg = json.loads((src / "config.json").read_text())
    with pytest.raises(ConfigError, match="mlp_only_layers"):
        hf_mapping.model_fields_from_hf({**cfg, "mlp_only_layers": [0]})
    with pytest.raises(ConfigError, match="decoder_sparse_step"):
        hf_mapping.model_fields_from_hf({**cfg, "decoder_sparse_step": 2})
    m = model_config_from_hf(src)
    with pytest.raises(ConfigError, match="model.moe_shared_expert_ffn_hidden_size"):
        hf_mapping.hf_config_dict(m.apply_overrides(["moe_shared_expert_ffn_hidden_size=64"]))
    shape = hf_mapping.Shape.of(m)
    sd = dict(load_hf_state_dict(src).items())
    with pytest.raises(KeyError, match="lack 'model.layers.1.mlp.experts.3.up_proj.weight'"):
        hf_mapping.hf_to_mcore(
            {k: v for k, v in sd.items() if k != "model.layers.1.mlp.experts.3.up_proj.weight"}, shape
        )
    with pytest.raises(KeyError, match="does not map"):  # a fifth expert the config does not declare
        hf_mapping.hf_to_mcore({**sd, "model.layers.0.mlp.experts.4.down_proj.weight": torch.zeros(64, 32)}, shape)


def test_conversion_builds_the_moe_recipe_on_one_cpu_process():
    """mcore2hf of an EP=8 / CP=8 GPU run builds its model here with EP=1, local spec (sequential experts)."""
    from recipe_helpers import train_recipe

    from midtrain.train.hf_import import conversion_config
    from midtrain.train.model import resolve_impl

    gpu_run = train_recipe("qwen3_30b_a3b_256k_h100")
    cfg = conversion_config(gpu_run).validate()
    assert resolve_impl(cfg) == "local" and (cfg.parallel.expert, cfg.parallel.expert_tensor) == (1, None)
    assert cfg.model == gpu_run.model


def test_expert_names_are_numbered_globally_in_either_spec():
    from midtrain.train.hf_import import global_expert_name

    # expert-parallel rank 1 of 2 with 4 experts holds experts 2 and 3 as its local 0 and 1
    assert (
        global_expert_name("mlp.experts.local_experts.1.linear_fc2.weight", 2)
        == "mlp.experts.local_experts.3.linear_fc2.weight"
    )
    assert global_expert_name("mlp.experts.linear_fc1.weight0", 2) == "mlp.experts.local_experts.2.linear_fc1.weight"
    assert global_expert_name("mlp.router.weight", 2) == "mlp.router.weight"
    assert global_expert_name("self_attention.linear_qkv.weight", 0) == "self_attention.linear_qkv.weight"
