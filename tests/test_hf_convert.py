"""HF <-> megatron-core conversion: logits parity with transformers, exact round trip, TP=2 over gloo."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
from hf_helpers import FAMILIES, hf_logits, make_hf_model, tokens, tp2_worker
from megatron.core.models.gpt import GPTModel

from midtrain.cli import main as cli_main
from midtrain.config import ConfigError
from midtrain.train import distributed, hf_mapping
from midtrain.train.config import TrainConfig
from midtrain.train.hf_export import save_safetensors
from midtrain.train.hf_import import load_hf_into, load_hf_state_dict, model_config_from_hf
from midtrain.train.model import build_gpt_model

# Context-extension variants: YaRN on Qwen3, Llama-3.1's own llama3 scaling (needs 8K < max positions).
ROPE_VARIANTS = {
    "qwen3": {"rope_type": "yarn", "rope_theta": 1_000_000.0, "factor": 4.0, "original_max_position_embeddings": 128},
    "llama3": {
        "rope_type": "llama3",
        "rope_theta": 500_000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


@pytest.fixture
def world_of_one():
    distributed.initialize(seed=1)
    yield
    distributed.destroy()


def _megatron_from_hf(path: Path) -> tuple[TrainConfig, GPTModel]:
    cfg = TrainConfig(model=model_config_from_hf(path))
    cfg.precision.dtype = "fp32"
    cfg.precision.transformer_impl = "local"
    cfg.data.seq_length = 64
    cfg.validate()
    model = build_gpt_model(cfg).eval()
    load_hf_into(model, path, cfg.model)
    return cfg, model


def _mc_logits(model: torch.nn.Module, toks: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(toks, torch.arange(toks.shape[1])[None], attention_mask=None)


@pytest.mark.parametrize("rope", ["default", "scaled"])
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(world_of_one, tmp_path, family, rope):
    kwargs: dict[str, Any] = {}
    if rope == "scaled":
        kwargs = {"rope": ROPE_VARIANTS[family], "max_position_embeddings": 32_768 if family == "llama3" else 512}
    src = make_hf_model(family, tmp_path / "hf", **kwargs)
    cfg, model = _megatron_from_hf(src)
    if rope == "scaled":
        assert cfg.model.rope_scaling == ("yarn" if family == "qwen3" else "llama3")
    toks = tokens(48)
    ref = hf_logits(src, toks)
    ours = _mc_logits(model, toks)
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max().item() < 1e-5
    assert ref.abs().max().item() > 0.5  # not a degenerate all-zero comparison

    # The position tables must agree far beyond the test sequence too (scaling bites at long range).
    from transformers import AutoModelForCausalLM

    hf_model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    n = 20_000 if family == "llama3" else 500
    pos = torch.arange(n)[None]
    cos, sin = hf_model.model.rotary_emb(torch.zeros(1, dtype=torch.float32), pos)
    emb = model.rotary_pos_emb(n)
    emb = emb[0] if isinstance(emb, tuple) else emb
    scale = getattr(model.config, "yarn_rotary_scaling_factor", None)
    mscale = 1.0 if scale is None else 0.1 * torch.log(torch.tensor(scale)).item() + 1.0
    freqs = emb.reshape(n, -1)
    assert torch.allclose(torch.cos(freqs) * mscale, cos[0], atol=1e-5)
    assert torch.allclose(torch.sin(freqs) * mscale, sin[0], atol=1e-5)


def test_wrong_layout_is_caught_by_the_parity_test(world_of_one, tmp_path, monkeypatch):
    """Negative control: megatron's per-group [q, k, v] interleaving matters (plain concat fails)."""
    src = make_hf_model("qwen3", tmp_path / "hf")
    monkeypatch.setattr(hf_mapping, "fuse_qkv", lambda q, k, v, s: torch.cat([q, k, v], 0))
    _, model = _megatron_from_hf(src)
    toks = tokens(16)
    assert (_mc_logits(model, toks) - hf_logits(src, toks)).abs().max().item() > 1e-2


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_is_exact_and_loads_in_transformers(tmp_path, family, monkeypatch):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from midtrain.train import hf_export

    # Qwen3: fp32, one file. Llama: bf16 as released, sharded safetensors in and out (with an index).
    bf16 = family == "llama3"
    src = make_hf_model(
        family,
        tmp_path / "hf",
        rope=ROPE_VARIANTS[family],
        max_position_embeddings=32_768 if family == "llama3" else 512,
        dtype=torch.bfloat16 if bf16 else torch.float32,
        max_shard_size="40KB" if bf16 else None,
    )
    if bf16:
        assert len(list(src.glob("*.safetensors"))) > 1
        monkeypatch.setattr(hf_export, "SHARD_BYTES", 40_000)
    mc, back = tmp_path / "mc", tmp_path / "back"
    assert cli_main(["convert", "hf2mcore", str(src), str(mc)]) == 0
    assert (mc / "checkpoints" / "iter_0000000" / "complete.json").is_file()
    assert (mc / "hf_source" / "tokenizer.json").is_file()
    run_cfg = TrainConfig.from_yaml(mc / "config.yaml")
    assert run_cfg.model == model_config_from_hf(src)
    assert run_cfg.precision.dtype == ("bf16" if bf16 else "fp32")
    assert cli_main(["convert", "mcore2hf", str(mc), str(back)]) == 0
    if bf16:
        assert (back / "model.safetensors.index.json").is_file() and len(list(back.glob("*.safetensors"))) > 1

    a, b = load_hf_state_dict(src), load_hf_state_dict(back)
    assert sorted(a.keys()) == sorted(b.keys())
    assert all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a.keys())
    toks = tokens(32)
    assert torch.equal(hf_logits(src, toks), hf_logits(back, toks))
    exported = json.loads((back / "config.json").read_text())
    assert (
        exported["rope_parameters"] == {**ROPE_VARIANTS[family], "beta_fast": 32.0, "beta_slow": 1.0}
        if family == "qwen3"
        else exported["rope_parameters"] == ROPE_VARIANTS[family]
    )
    assert exported["rope_scaling"]["rope_type"] == ROPE_VARIANTS[family]["rope_type"]  # legacy key
    assert exported["rope_theta"] == ROPE_VARIANTS[family]["rope_theta"]
    assert exported["eos_token_id"] == 2  # carried over from the source config.json
    hf_cfg = AutoConfig.from_pretrained(back)
    assert hf_cfg.rope_parameters["rope_type"] == ROPE_VARIANTS[family]["rope_type"]
    tok = AutoTokenizer.from_pretrained(back)
    assert tok("def f():")["input_ids"] == AutoTokenizer.from_pretrained(src)("def f():")["input_ids"]
    assert AutoModelForCausalLM.from_pretrained(back).config.model_type == hf_cfg.model_type


@pytest.mark.slow
def test_tp2_and_pp2_over_gloo_load_the_checkpoint_and_export_it_back(tmp_path):
    """hf2mcore output loads at TP=2 and PP=2 (dist_checkpointing reshards), load_hf_into cuts TP shards and
    PP stages itself, and a checkpoint saved at TP=2 exports back to the exact HF weights."""
    import torch.multiprocessing as mp

    src = make_hf_model("llama3", tmp_path / "hf")
    mc = tmp_path / "mc"
    assert cli_main(["convert", "hf2mcore", str(src), str(mc), "--tp", "2"]) == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tp2_run = tmp_path / "tp2_run"
    mp.spawn(tp2_worker, args=(2, port, str(mc), str(src), str(tp2_run)), nprocs=2, join=True)
    got = torch.load(tp2_run / "logits.pt")
    ref = hf_logits(src, tokens())
    assert (got["from_ckpt"] - ref).abs().max().item() < 1e-5
    assert (got["from_hf"] - ref).abs().max().item() < 1e-5
    stage0 = json.loads((tp2_run / "pp_rank0.json").read_text())
    stage1 = json.loads((tp2_run / "pp_rank1.json").read_text())
    assert "embedding.word_embeddings.weight" in stage0 and "output_layer.weight" in stage1
    assert all(".layers.0." in n for n in stage0 if "layers" in n)
    assert all(".layers.1." in n for n in stage1 if "layers" in n) and any("layers" in n for n in stage1)

    back = tmp_path / "back"
    assert cli_main(["convert", "mcore2hf", str(tp2_run), str(back)]) == 0
    a, b = load_hf_state_dict(src), load_hf_state_dict(back)
    assert all(torch.equal(a[k], b[k]) for k in a.keys())
    assert (back / "tokenizer.json").is_file()  # found through the run's init chain (hf_source)


def test_bad_inputs_name_the_problem(world_of_one, tmp_path):
    src = make_hf_model("qwen3", tmp_path / "hf")
    cfg = json.loads((src / "config.json").read_text())
    with pytest.raises(ConfigError, match="model_type 'mistral'"):
        hf_mapping.model_fields_from_hf({**cfg, "model_type": "mistral"})
    with pytest.raises(ConfigError, match="attention_bias"):
        hf_mapping.model_fields_from_hf({**cfg, "attention_bias": True})
    with pytest.raises(ConfigError, match="rope_type 'longrope'"):
        hf_mapping.model_fields_from_hf({**cfg, "rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}})
    shape = hf_mapping.Shape.of(model_config_from_hf(src))
    sd = dict(load_hf_state_dict(src).items())
    with pytest.raises(KeyError, match="lack 'model.layers.1.mlp.up_proj.weight'"):
        hf_mapping.hf_to_mcore({k: v for k, v in sd.items() if k != "model.layers.1.mlp.up_proj.weight"}, shape)
    with pytest.raises(KeyError, match="does not map"):
        hf_mapping.hf_to_mcore({**sd, "model.layers.0.self_attn.q_proj.bias": torch.zeros(64)}, shape)
    # a recipe whose shape differs from the HF directory it starts from
    other = TrainConfig(model=model_config_from_hf(src))
    other.model.hidden_size = 128
    with pytest.raises(ConfigError, match="model.hidden_size"):
        load_hf_into(torch.nn.Module(), src, other.model)
    # a layout the shape cannot take is refused before anything is written
    assert cli_main(["convert", "hf2mcore", str(src), str(tmp_path / "mc"), "--tp", "3"]) == 2
    assert not (tmp_path / "mc").exists()
    assert cli_main(["convert", "mcore2hf", str(tmp_path / "nothing"), str(tmp_path / "out")]) == 2


def test_te_names_and_qkv_helpers_round_trip():
    s = hf_mapping.Shape(
        num_layers=1,
        num_attention_heads=8,
        num_query_groups=2,
        head_dim=4,
        hidden_size=16,
        qk_layernorm=True,
        tie_embeddings=True,
    )
    q, k, v = torch.randn(32, 16), torch.randn(8, 16), torch.randn(8, 16)
    fused = hf_mapping.fuse_qkv(q, k, v, s)
    # group 0 = rows of q heads 0-3, then k head 0, then v head 0
    assert torch.equal(fused[:16], q[:16]) and torch.equal(fused[16:20], k[:4]) and torch.equal(fused[20:24], v[:4])
    assert all(torch.equal(x, y) for x, y in zip(hf_mapping.split_qkv(fused, s), (q, k, v)))
    local = {
        "decoder.layers.3.input_layernorm.weight": 1,
        "decoder.layers.3.pre_mlp_layernorm.weight": 2,
        "decoder.layers.3.mlp.linear_fc1.weight": 3,
    }
    te = hf_mapping.to_te_names(local)  # type: ignore[arg-type]  # ints stand in for tensors: renaming never reads them
    assert "decoder.layers.3.self_attention.linear_qkv.layer_norm_weight" in te and hf_mapping.uses_te_names(set(te))
    assert hf_mapping.from_te_names(te) == local


def test_conversion_builds_any_recipe_on_one_cpu_process():
    """mcore2hf of a GPU run (TE, CP, SP, distributed optimizer, FP8) builds its model here at TP=PP=1."""
    from recipe_helpers import train_recipe

    from midtrain.train.hf_import import conversion_config
    from midtrain.train.model import resolve_impl

    gpu_run = train_recipe("qwen3_32b_256k_h200", ["precision.fp8=hybrid"])
    cfg = conversion_config(gpu_run).validate()
    assert resolve_impl(cfg) == "local"
    assert (cfg.parallel.tensor, cfg.parallel.pipeline, cfg.parallel.context) == (1, 1, 1)
    assert cfg.model == gpu_run.model


def test_tokenizer_sources_in_order(tmp_path):
    from hf_helpers import save_tiny_tokenizer

    from midtrain.train.hf_export import copy_tokenizer

    tok_dir = tmp_path / "tok"
    save_tiny_tokenizer(tok_dir)
    out1, out2, out3 = (tmp_path / n for n in ("o1", "o2", "o3"))
    for d in (out1, out2, out3):
        d.mkdir()
    # --tokenizer wins over the run's source; a bare tokenizer.json is enough
    assert copy_tokenizer(out1, tok_dir / "tokenizer.json", tmp_path / "nothing", "llama3") == str(
        tok_dir / "tokenizer.json"
    )
    assert (out1 / "tokenizer.json").is_file()
    assert copy_tokenizer(out2, None, tok_dir, "llama3") == str(tok_dir)
    assert (out2 / "tokenizer_config.json").is_file()
    with pytest.raises(ConfigError, match="--tokenizer"):
        copy_tokenizer(out3, tmp_path / "empty_dir", None, "llama3")
    with pytest.raises(ConfigError, match="pass --tokenizer"):
        copy_tokenizer(out3, None, None, "llama3")  # Llama has no offline default


def _empty_extra_state(self) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8)  # what a Transformer Engine module saves without FP8


def _set_extra_state(self, state) -> None:
    self.loaded_extra_state = state


def give_te_extra_state(model: torch.nn.Module) -> list[str]:
    """Make ``model``'s modules carry ``_extra_state`` where a Transformer Engine model's do: its norms (TE's
    RMSNorm: q/k layernorms, final layernorm), the linear layers of the decoder (TE linears) and core attention.
    megatron's sharded_state_dict then holds a ShardedObject ``<module>._extra_state`` for each, as with TE.
    Returns the modules changed."""
    changed = []
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        # TE fuses the input and pre-MLP norms into linear_qkv / linear_fc1; identity placeholders stay
        norm = leaf in ("q_layernorm", "k_layernorm", "final_layernorm") and any(True for _ in module.parameters())
        if name.startswith("decoder.") and (norm or leaf.startswith("linear_") or leaf == "core_attention"):
            cls = module.__class__
            module.__class__ = type(
                f"TE{cls.__name__}",
                (cls,),
                {"get_extra_state": _empty_extra_state, "set_extra_state": _set_extra_state},
            )
            changed.append(name)
    return changed


def test_converted_checkpoint_loads_into_a_model_with_te_extra_state(world_of_one, tmp_path):
    """`convert hf2mcore` writes the local spec's keys; a TE model asks for `..._extra_state` besides: the load
    takes the weights and leaves the extra state fresh, with the same logits as the local model."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    from midtrain.train import checkpoint as ckpt
    from midtrain.train.hf_import import convert_hf_to_mcore

    src = make_hf_model("qwen3", tmp_path / "hf", seed=4)
    mc = tmp_path / "mc"
    convert_hf_to_mcore(src, mc)
    cfg = TrainConfig.from_yaml(mc / "config.yaml").apply_overrides(
        ["precision.transformer_impl=local", "precision.dtype=fp32"]
    )
    local = build_gpt_model(cfg).eval()
    ckpt.load_weights(mc, local)
    te_like = build_gpt_model(cfg).eval()
    changed = give_te_extra_state(te_like)
    extra = {k for k, v in te_like.sharded_state_dict().items() if isinstance(v, ShardedObject)}
    assert "decoder.final_layernorm._extra_state" in extra
    assert "decoder.layers.0.self_attention.q_layernorm._extra_state" in extra
    assert "decoder.layers.1.mlp.linear_fc2._extra_state" in extra and len(changed) == 1 + 2 * 7
    ckpt.load_weights(mc, te_like)
    toks = tokens()
    assert torch.equal(_mc_logits(te_like, toks), _mc_logits(local, toks))
    assert torch.allclose(_mc_logits(local, toks), hf_logits(src, toks), atol=1e-4)
    # A tensor the checkpoint lacks (not extra state) is still an error naming it
    with pytest.raises(ckpt.CheckpointError, match=r"cannot be loaded into this model: .*shape mismatch .*decoder"):
        ckpt.load_weights(mc, build_gpt_model(cfg.apply_overrides(["model.num_layers=3"])))


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600)])
def test_exported_safetensors_are_as_readable_as_the_umask_says(tmp_path, umask, mode):
    """safetensors writes its files 0600: an export on a shared filesystem was unreadable by the eval job of
    another account. One file and the sharded layout alike take the process's umask."""
    tensors = {"a": torch.zeros(64), "b": torch.ones(64)}
    old = os.umask(umask)
    try:
        one = save_safetensors(tensors, tmp_path, shard_bytes=1 << 20)
        (tmp_path / "sharded").mkdir()
        sharded = save_safetensors(tensors, tmp_path / "sharded", shard_bytes=256)
    finally:
        os.umask(old)
    assert one == ["model.safetensors"] and len(sharded) == 2
    paths = [tmp_path / one[0], *(tmp_path / "sharded" / f for f in sharded)]
    assert {oct(p.stat().st_mode & 0o777) for p in paths} == {oct(mode)}
