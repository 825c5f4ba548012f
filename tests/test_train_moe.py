"""Mixture of experts on CPU: training with router losses logged, layout rules, exact resume with the router
state, expert parallelism (EP=2 over gloo) against EP=1 from the same Hugging Face weights, the SFT probe."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import MOE, destroy_process_groups, metrics, shards, tiny_moe_config, write_shards  # noqa: F401 (fixtures used by name)

from midtrain.config import ConfigError
from midtrain.train import distributed
from midtrain.train.checkpoint import list_checkpoints
from midtrain.train.trainer import train

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")


def _run(shards, run_dir, **overrides):
    result = train(tiny_moe_config(**{"data.path": str(shards), "run_dir": str(run_dir), **overrides}))
    distributed.destroy()
    return result


@pytest.fixture(scope="module")
def straight(shards, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("moe_straight")
    _run(shards, run_dir, **{"optim.train_steps": 8, "checkpoint.save_interval": 4})
    return run_dir


def test_moe_trains_and_logs_router_losses(straight):
    from midtrain.train.flops import matmul_params
    from midtrain.train.logger import RunLogger

    rows = metrics(straight)
    line = RunLogger(straight, tiny_moe_config(), enabled=False).format(rows[0])
    assert f"moe balance {rows[0]['moe_load_balancing_loss']:.3f}" in line
    assert [r["step"] for r in rows] == list(range(1, 9))
    first, last = sum(r["loss"] for r in rows[:2]) / 2, sum(r["loss"] for r in rows[-2:]) / 2
    assert last < first - 0.2, (first, last)
    for r in rows:
        # Switch-style balancing loss: 1.0 when routing is uniform, larger when unbalanced
        assert 0.9 < r["moe_load_balancing_loss"] < 4.0
        assert r["moe_aux_loss"] == pytest.approx(MOE["model.moe_aux_loss_coeff"] * r["moe_load_balancing_loss"])
    assert len({r["moe_load_balancing_loss"] for r in rows}) > 1  # measured each step, not a constant
    info = json.loads((straight / "run_info.json").read_text())
    cfg = tiny_moe_config()
    # every expert is a parameter; only the top-2 of 4 count towards FLOPs (MFU)
    h, f = cfg.model.hidden_size, cfg.model.moe_ffn_hidden_size
    assert f is not None
    assert info["parameters"]["total"] - matmul_params(cfg) > 2 * 3 * h * f * cfg.model.num_layers - 1


def test_moe_resume_is_bitwise_exact_with_router_state(straight, shards, tmp_path):
    """Steps 1-4, stop, resume 5-8 == 8 straight steps: losses and router losses bitwise; the checkpoint holds
    the router weights and their optimizer state."""
    from torch.distributed.checkpoint import FileSystemReader

    want = {r["step"]: (r["loss"], r["grad_norm"], r["moe_load_balancing_loss"]) for r in metrics(straight)}
    run_dir = tmp_path / "resumed"
    _run(shards, run_dir, **{"optim.train_steps": 8, "checkpoint.save_interval": 4})
    for step, path in list_checkpoints(run_dir):
        if step != 4:
            shutil.rmtree(path)
    keys = set(FileSystemReader(str(run_dir / "checkpoints" / "iter_0000004")).read_metadata().state_dict_metadata)
    # megatron's layer-stacked names; experts stacked too (the format grouped-GEMM experts also use)
    assert {
        "decoder.layers.mlp.router.weight",
        "optimizer.state.exp_avg.decoder.layers.mlp.router.weight",
        "optimizer.state.exp_avg_sq.decoder.layers.mlp.router.weight",
        "decoder.layers.mlp.experts.experts.linear_fc1.weight",
    } <= keys
    _run(shards, run_dir, **{"optim.train_steps": 8})
    got = {r["step"]: (r["loss"], r["grad_norm"], r["moe_load_balancing_loss"]) for r in metrics(run_dir)}
    assert got == want


def test_moe_layout_errors_name_the_field():
    with pytest.raises(ConfigError, match="parallel.expert: model.num_experts=4 is not divisible by expert=3"):
        tiny_moe_config(**{"parallel.expert": 3})
    with pytest.raises(ConfigError, match="parallel.expert: expert=2 needs a mixture-of-experts model"):
        tiny_moe_config(**{"model.num_experts": "null", "parallel.expert": 2})
    with pytest.raises(ConfigError, match="parallel.expert_tensor: model.moe_ffn_hidden_size=32 is not divisible"):
        tiny_moe_config(**{"parallel.expert_tensor": 3})
    with pytest.raises(ConfigError, match="parallel.expert: expert=4 x expert_tensor=1 = 4 does not divide"):
        tiny_moe_config(**{"parallel.expert": 4, "parallel.data": 2, "optim.global_batch_size": 2})
    with pytest.raises(ConfigError, match="parallel.sequence_parallel: MoE layers with tensor=2"):
        tiny_moe_config(**{"parallel.tensor": 2})
    with pytest.raises(ConfigError, match="model.moe_router_topk: 5 must be in"):
        tiny_moe_config(**{"model.moe_router_topk": 5})
    with pytest.raises(ConfigError, match="model.moe_ffn_hidden_size: must be set"):
        tiny_moe_config(**{"model.moe_ffn_hidden_size": "null"})
    with pytest.raises(ConfigError, match="model.moe_router_topk_norm"):
        tiny_moe_config(**{"model.moe_router_score_function": "sigmoid", "model.moe_router_topk_norm": False})
    # folding: EP=2 over data=2 x context=1 x tensor=1 is a valid layout; at launch the world must hold it
    from midtrain.train.layout import resolve_data_parallel

    ok = tiny_moe_config(**{"parallel.expert": 2, "optim.global_batch_size": 4})
    assert resolve_data_parallel(ok, 2) == 2
    with pytest.raises(
        ConfigError, match="parallel.expert: expert=2 x expert_tensor=1 x pipeline=1 does not divide the world size 3"
    ):
        resolve_data_parallel(ok.apply_overrides(["optim.global_batch_size=3"]), 3)


def test_moe_variants_train_a_step(shards, tmp_path):
    """Shared expert, sigmoid routing, capacity factor (token dropping), z-loss: megatron's layer on CPU."""
    _run(
        shards,
        tmp_path / "v",
        **{
            "optim.train_steps": 2,
            "checkpoint.save_final": False,
            "model.moe_shared_expert_ffn_hidden_size": 48,
            "model.moe_router_score_function": "sigmoid",
            "model.moe_capacity_factor": 1.0,
            "model.moe_z_loss_coeff": 1e-3,
            "model.moe_load_balancing": "seq_aux_loss",
        },
    )
    rows = metrics(tmp_path / "v")
    assert len(rows) == 2 and all(r["loss"] == r["loss"] for r in rows)
    assert rows[0]["moe_z_loss"] > 0 and rows[0]["moe_load_balancing_loss"] > 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ep2_over_gloo_matches_ep1_from_hf_weights(shards, tmp_path):
    """hf2mcore a tiny Qwen3-MoE; train from it in one process (EP=1) and under torchrun with EP=2 (each rank
    loads only its 2 of the 4 experts from the checkpoint): same losses, grad norms and router losses."""
    from hf_helpers import make_hf_model

    from midtrain.cli import main as cli_main
    from midtrain.train.config import TrainConfig

    src = make_hf_model("qwen3_moe", tmp_path / "hf")
    mc = tmp_path / "mc"
    assert cli_main(["convert", "hf2mcore", str(src), str(mc)]) == 0
    distributed.destroy()
    cfg = tiny_moe_config(
        **{
            "data.path": str(shards),
            "optim.train_steps": 4,
            "optim.global_batch_size": 4,
            "checkpoint.save_interval": 100,
            "checkpoint.save_final": False,
            "init_from": str(mc),
        }
    )
    cfg.model = TrainConfig.from_yaml(mc / "config.yaml").model  # the HF model's shape
    cfg.validate()
    cfg_path = tmp_path / "cfg.yaml"
    cfg.save_yaml(cfg_path)
    train(cfg.apply_overrides([f"run_dir={tmp_path / 'ep1'}"]))
    distributed.destroy()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    # EP=2 from the converted checkpoint (dist_checkpointing hands each rank its experts), and straight from
    # the HF directory (load_hf_into picks this rank's experts itself)
    for name, init in (("ep2", mc), ("ep2_hf", src)):
        cmd = [
            str(TORCHRUN),
            "--nproc-per-node",
            "2",
            "--master-port",
            str(_free_port()),
            "-m",
            "midtrain.cli",
            "train",
            str(cfg_path),
            f"run_dir={tmp_path / name}",
            "parallel.expert=2",
            f"init_from={init}",
        ]
        out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    ep1, ep2, ep2_hf = (metrics(tmp_path / n) for n in ("ep1", "ep2", "ep2_hf"))
    assert len(ep1) == len(ep2) == len(ep2_hf) == 4 and ep1[-1]["loss"] < ep1[0]["loss"]
    for a, b, c in zip(ep1, ep2, ep2_hf):
        for key in ("loss", "grad_norm", "moe_load_balancing_loss"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (key, a["step"])
            assert c[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), ("from HF", key, a["step"])


@pytest.mark.slow
def test_sft_probe_runs_from_a_moe_checkpoint(tmp_path):
    """The fixed probe from an MoE checkpoint: trains MoE (router losses logged), scores held-out traces,
    exports a Qwen3-MoE Hugging Face model that transformers loads."""
    from recipe_helpers import train_recipe
    from sft_helpers import sample_trace_docs, write_documents
    from transformers import AutoConfig

    from midtrain.sft.config import SFTConfig
    from midtrain.sft.probe import run_probe
    from midtrain.train.initial_checkpoint import save_initial_checkpoint
    from recipes import resolve_config

    traces = write_documents(tmp_path / "prep" / "traces", sample_trace_docs())
    start_cfg = train_recipe(
        "demo_tiny_moe",
        [
            "model.hidden_size=32",
            "model.moe_ffn_hidden_size=32",
            "data.seq_length=512",
            "model.max_position_embeddings=1024",
        ],
    )
    start = save_initial_checkpoint(start_cfg, tmp_path / "moe_base")
    probe = resolve_config(
        "sft_probe_demo",
        SFTConfig,
        "sft",
        [
            f"traces=[{traces}]",
            "train.optim.train_steps=3",
            "train.checkpoint.save_interval=3",
            "train.data.seq_length=512",
        ],
    )
    res = run_probe(probe, start.parent.parent, tmp_path / "probe")
    distributed.destroy()
    assert res["exit_code"] == 0 and res["heldout_loss"] == res["heldout_loss"] and res["heldout_tokens"] > 0
    rows = metrics(Path(res["run_dir"]))
    assert len(rows) == 3 and all("moe_load_balancing_loss" in r for r in rows)
    hf = AutoConfig.from_pretrained(res["hf_dir"])
    assert hf.model_type == "qwen3_moe" and hf.num_experts == 4


@pytest.mark.gpu
def test_gpu_moe_matches_transformers_with_alltoall_dispatch(tmp_path):
    """On a GPU the MoE layer dispatches tokens all-to-all (CUDA streams); logits still equal transformers'."""
    import torch
    from hf_helpers import hf_logits, make_hf_model, tokens

    from midtrain.train.config import TrainConfig
    from midtrain.train.hf_import import load_hf_into, model_config_from_hf
    from midtrain.train.model import build_gpt_model

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    src = make_hf_model("qwen3_moe", tmp_path / "hf")
    distributed.initialize(seed=1)
    try:
        cfg = TrainConfig(model=model_config_from_hf(src))
        cfg.precision.dtype, cfg.precision.transformer_impl, cfg.data.seq_length = "fp32", "local", 64
        model = build_gpt_model(cfg.validate()).eval()
        assert model.config.moe_token_dispatcher_type == "alltoall"
        load_hf_into(model, src, cfg.model)
        toks = tokens(48)
        with torch.no_grad():
            ours = model(toks.cuda(), torch.arange(48, device="cuda")[None], attention_mask=None).cpu()
        assert (ours - hf_logits(src, toks)).abs().max().item() < 1e-4
    finally:
        distributed.destroy()


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["local", "transformer_engine"])
def test_gpu_moe_train_steps_lower_the_loss(tmp_path, impl):
    """bf16 MoE training on one GPU: sequential experts (local spec) or TE's grouped GEMM experts."""
    import torch

    from midtrain.train.model import te_available

    if not torch.cuda.is_available() or (impl == "transformer_engine" and not te_available()):
        pytest.skip("needs a CUDA GPU" + (" and Transformer Engine" if impl == "transformer_engine" else ""))
    shards = write_shards(tmp_path / "shards", sequences=24, seq_length=256)
    cfg = tiny_moe_config(
        **{
            "precision.transformer_impl": impl,
            "precision.dtype": "bf16",
            "data.path": str(shards),
            "data.seq_length": 256,
            "run_dir": str(tmp_path / "run"),
            "optim.train_steps": 12,
        }
    )
    assert train(cfg)["exit_code"] == 0
    rows = metrics(tmp_path / "run")
    assert len(rows) == 12 and rows[-1]["loss"] < rows[0]["loss"]
    assert all(0.9 < r["moe_load_balancing_loss"] < 4.0 for r in rows) and rows[-1]["tflops_per_device"] > 0


def test_router_losses_exclude_the_padding_piece():
    """The load-balancing and z-losses count real tokens only: two packed sequences that differ only in the
    content of their padding piece give the same router losses (megatron excludes padding when the trainer
    passes padding_mask; before, the padding tokens were routed and counted)."""
    import torch
    from train_helpers import packed_sample

    from midtrain.train import moe
    from midtrain.train.batch import to_batch
    from midtrain.train.model import build_gpt_model
    from midtrain.train.trainer import _forward_step

    cfg = tiny_moe_config(**{"model.moe_z_loss_coeff": 1e-3})
    distributed.initialize(seed=cfg.seed)
    model = build_gpt_model(cfg).train()
    sample = packed_sample([20, 16, 28], vocab=cfg.model.vocab_size, seed=3)  # the last piece is padding
    other = {**sample, "tokens": sample["tokens"].clone()}
    other["tokens"][36:] = torch.randint(1, cfg.model.vocab_size, (28,), generator=torch.Generator().manual_seed(1))

    def router_losses(s: dict, padding_aware: bool) -> dict[str, float]:
        moe.reset_router_log()
        output, loss_func = _forward_step(2, iter([to_batch(s)]), model, moe_model=padding_aware)
        loss_func(output)[0].backward()
        return moe.step_router_metrics(cfg, 1)

    a, b = router_losses(sample, True), router_losses(other, True)
    assert set(a) == {"moe_load_balancing_loss", "moe_z_loss", "moe_aux_loss"}
    assert a == pytest.approx(b, rel=1e-6)
    # the control: with the padding counted, the padding content changes the router losses
    c, d = router_losses(sample, False), router_losses(other, False)
    assert abs(c["moe_load_balancing_loss"] - d["moe_load_balancing_loss"]) > 1e-4
