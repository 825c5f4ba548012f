"""MoE estimates: total vs active parameters against megatron-core's own model, active-parameter FLOPs
(the MFU count), expert memory under expert parallelism, and the Qwen3-30B-A3B recipes."""

from __future__ import annotations

import pytest
import torch
from recipe_helpers import train_recipe

from midtrain.cli import main as cli_main
from midtrain.train import distributed
from midtrain.train.estimate import flops_per_token, memory_per_gpu
from midtrain.train.model import build_gpt_model


@pytest.fixture(scope="module")
def world_of_one():
    distributed.initialize(seed=1)
    yield
    distributed.destroy()


def test_30b_a3b_counts_match_megatron_core(world_of_one):
    cfg = train_recipe(
        "qwen3_30b_a3b_256k_h200",
        [
            "precision.transformer_impl=local",
            "parallel.context=1",
            "parallel.expert=1",
            "parallel.distributed_optimizer=false",
            "model.num_layers=2",
        ],
    ).validate()  # 2 of 48 layers: quick
    with torch.device("meta"):
        model = build_gpt_model(cfg)
    named = dict(model.named_parameters())
    pc = cfg.model.param_count()
    assert pc.total == sum(p.numel() for p in named.values())
    experts = sum(p.numel() for k, p in named.items() if ".local_experts." in k)
    assert experts == pc.expert_per_layer * cfg.model.num_layers
    # FLOPs/MFU count what a token uses: every linear layer except the 120 experts it is not routed to
    m = cfg.model
    assert m.num_experts is not None
    linear = sum(p.numel() for k, p in named.items() if ".linear_" in k or "router" in k)
    active_linear = linear - experts * (m.num_experts - m.moe_router_topk) // m.num_experts
    assert pc.flops_params == active_linear + m.vocab_size * m.hidden_size
    assert flops_per_token(cfg).dense == 6 * pc.flops_params


def test_30b_a3b_totals_and_active_share():
    pc = train_recipe("qwen3_30b_a3b_256k_h200").model.param_count()
    assert 30.4e9 < pc.total < 30.6e9  # "30.5B"
    assert 3.2e9 < pc.active < 3.4e9  # "3.3B activated"
    dense_equiv = train_recipe("qwen3_30b_a3b_256k_h200", ["model.moe_router_topk=128"]).model.param_count()
    assert dense_equiv.active == pytest.approx(pc.total, rel=1e-9)  # all experts active = every parameter


def test_expert_parallelism_splits_expert_weights_and_their_optimizer_state():
    base = train_recipe("qwen3_30b_a3b_256k_h200")
    mem8 = memory_per_gpu(base)
    pc = base.model.param_count()
    experts = pc.expert_per_layer * pc.num_layers
    mem4 = memory_per_gpu(base.apply_overrides(["parallel.expert=4"]))
    # weights: half the EP -> twice the experts on the GPU (bf16: 2 bytes each)
    assert mem4.weights - mem8.weights == pytest.approx(2 * (experts / 4 - experts / 8))
    # 16 GPUs: the expert optimizer state is sharded over 2 expert-data-parallel ranks instead of 1
    mem8_16 = memory_per_gpu(base, num_gpus=16)
    assert mem8.optimizer - mem8_16.optimizer == pytest.approx(12 * experts / 8 / 2, rel=0.2)
    assert any("expert-data-parallel" in n for n in mem8.notes)


def test_config_prints_the_moe_estimate(capsys):
    assert cli_main(["config", "qwen3_30b_a3b_256k_h200"]) == 0
    out = capsys.readouterr().out
    assert "30.53B parameters" in out and "3.35B active per token" in out and "EP=8" in out
    assert "N = active parameters" in out and "routed-expert parameters on this GPU" in out
    assert "verdict H200 SXM 141GB: fits" in out
