"""Shared helpers for the HF conversion tests: tiny random Llama-3 / Qwen3 models saved to a directory."""

from __future__ import annotations

from pathlib import Path

import torch

FAMILIES = ("qwen3", "llama3")


def hf_config(family: str, rope: dict | None = None, tied: bool | None = None, **over):
    """A tiny transformers config of the family (GQA 4 heads / 2 groups, head_dim 16, vocab 256).

    ``qwen3_moe``: Qwen3-MoE with 4 experts of width 32, top-2, renormalised top-k scores."""
    from transformers import LlamaConfig, Qwen3Config, Qwen3MoeConfig

    common = dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        initializer_range=0.08,
        bos_token_id=1,
        eos_token_id=2,
    )
    if family == "qwen3_moe":
        common.update(
            num_experts=4,
            moe_intermediate_size=32,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            router_aux_loss_coef=0.01,
        )
    common.update(over)
    if family == "qwen3_moe":
        rope = rope or {"rope_type": "default", "rope_theta": 1_000_000.0}
        return Qwen3MoeConfig(**common, rope_parameters=rope, tie_word_embeddings=bool(tied))
    if family == "qwen3":
        rope = rope or {"rope_type": "default", "rope_theta": 1_000_000.0}
        return Qwen3Config(**common, rope_parameters=rope, tie_word_embeddings=True if tied is None else tied)
    rope = rope or {"rope_type": "default", "rope_theta": 500_000.0}
    return LlamaConfig(**common, rope_parameters=rope, tie_word_embeddings=False if tied is None else tied)


def make_hf_model(
    family: str,
    out: Path,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    max_shard_size: str | None = None,
    **cfg_kwargs,
) -> Path:
    """Random weights (norm gains too, so a swapped norm shows up), saved with save_pretrained."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(family, **cfg_kwargs), dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    model = model.to(dtype)
    model.save_pretrained(out, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    save_tiny_tokenizer(out)
    return out


def bigram_qwen3(out: Path, chain: list[int], max_position_embeddings: int = 256) -> None:
    """Save a Qwen3 (the real vocabulary) whose blocks are zero, so each next token depends only on the current
    one: greedy decoding walks ``chain`` (token chain[i] -> chain[i + 1]). A reply that is known in advance."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(
        vocab_size=151669,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        tie_word_embeddings=False,
        max_position_embeddings=max_position_embeddings,
    )
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.ones_like(p) if "norm" in name else torch.zeros_like(p))
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        for i, (a, b) in enumerate(zip(chain, chain[1:])):
            emb[a, i] = 1.0
            head[b, i] = 10.0
    model.save_pretrained(out)


def save_tiny_tokenizer(out: Path) -> None:
    """A 256-entry byte-level BPE tokenizer (matches the tiny vocab), saved the way HF models carry it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=sorted(alphabet)[2]).save_pretrained(out)


def hf_logits(path: Path, tokens: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(tokens).logits


def tokens(n: int = 40, vocab: int = 256, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


def tp2_worker(rank: int, world: int, port: int, mc_dir: str, hf_dir: str, out_dir: str) -> None:
    """One of two gloo ranks: load the hf2mcore checkpoint and the HF dir at TP=2, save a TP=2 checkpoint."""
    import os

    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    import torch.distributed as dist
    from megatron.core import parallel_state

    from midtrain.train import checkpoint as ckpt
    from midtrain.train import distributed
    from midtrain.train.config import TrainConfig
    from midtrain.train.hf_import import load_hf_into
    from midtrain.train.model import build_gpt_model

    cfg = TrainConfig.from_yaml(Path(mc_dir) / "config.yaml").apply_overrides(
        ["precision.transformer_impl=local", f"run_dir={out_dir}", f"init_from={mc_dir}"]
    )
    assert cfg.parallel.tensor == 2, "hf2mcore --tp 2 records the layout"
    distributed.initialize(tensor=2, seed=11)
    group = parallel_state.get_tensor_model_parallel_group()

    def full_logits(model: torch.nn.Module) -> torch.Tensor:
        toks = tokens()
        with torch.no_grad():
            part = model(toks, torch.arange(toks.shape[1])[None], attention_mask=None)
        parts = [torch.empty_like(part) for _ in range(world)]
        dist.all_gather(parts, part.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    from_ckpt = build_gpt_model(cfg).eval()
    ckpt.load_weights(mc_dir, from_ckpt)
    from_hf = build_gpt_model(cfg).eval()
    load_hf_into(from_hf, hf_dir, cfg.model)
    a, b = full_logits(from_ckpt), full_logits(from_hf)
    if rank == 0:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        cfg.save_yaml(Path(out_dir) / "config.yaml")
    ckpt.save_checkpoint(out_dir, 5, from_hf, None, {"step": 5}, keep_last=1)
    # PP=2: each stage takes its own layers (global numbering) and the last stage the output layer, from
    # the HF directory and from the checkpoint alike.
    from midtrain.train import hf_mapping
    from midtrain.train.hf_import import load_hf_state_dict, local_to_global_names

    pp_cfg = cfg.apply_overrides(["parallel.tensor=1", "parallel.pipeline=2"])
    distributed.initialize(pipeline=2, seed=11)
    stage_hf, stage_ckpt = build_gpt_model(pp_cfg), build_gpt_model(pp_cfg)
    load_hf_into(stage_hf, hf_dir, pp_cfg.model)
    ckpt.load_weights(mc_dir, stage_ckpt)
    full = hf_mapping.hf_to_mcore(load_hf_state_dict(hf_dir), hf_mapping.Shape.of(pp_cfg.model))
    names = local_to_global_names(stage_hf)
    ckpt_params = dict(stage_ckpt.named_parameters())
    checked = []
    for local, p in stage_hf.named_parameters():
        assert torch.equal(p, full[names[local]]), local
        assert torch.equal(ckpt_params[local], p), local
        checked.append(names[local])
    if rank == 0:
        torch.save({"from_ckpt": a, "from_hf": b}, Path(out_dir) / "logits.pt")
    Path(out_dir, f"pp_rank{rank}.json").write_text(__import__("json").dumps(sorted(checked)))
    distributed.destroy()
