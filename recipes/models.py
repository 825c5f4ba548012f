"""Real-size midtraining recipes at 256K context: Qwen3 1.7B / 8B / 32B, Qwen3-30B-A3B (MoE) and
Llama-3.1-8B-shaped.

Each recipe is one base (`midtrain_256k`: the published model shape, RoPE extended to 256K, the
midtraining optimizer) plus a parallel layout for the target GPU, written as deltas. The H200 (141 GB)
layout is the reference; the H100 (80 GB) variant is the H200 recipe with the fields that change.
`midtrain config RECIPE` prints the size, FLOPs/token and the memory estimate with a verdict.

Shapes are the released config.json values (Qwen/Qwen3-*-Base, Qwen/Qwen3-30B-A3B-Base, meta-llama/Llama-3.1-8B). Start
from the
released weights with `init_from=PATH` (a Hugging Face model directory; see `midtrain convert`).
"""

from __future__ import annotations

from typing import Any

from midtrain.train.config import ModelConfig, TrainConfig
from recipes import recipe

SEQ_256K = 262_144

# Published shapes. Everything not listed is ModelConfig's default (RMSNorm eps 1e-6, no biases, SwiGLU).
SHAPES: dict[str, dict] = {
    "qwen3_1p7b": dict(
        family="qwen3",
        num_layers=28,
        hidden_size=2048,
        ffn_hidden_size=6144,
        num_attention_heads=16,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=151_936,
        tie_embeddings=True,
        qk_layernorm=True,
        rotary_base=1_000_000.0,
        max_position_embeddings=40_960,
    ),
    "qwen3_8b": dict(
        family="qwen3",
        num_layers=36,
        hidden_size=4096,
        ffn_hidden_size=12_288,
        num_attention_heads=32,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=151_936,
        tie_embeddings=False,
        qk_layernorm=True,
        rotary_base=1_000_000.0,
        max_position_embeddings=40_960,
    ),
    "qwen3_32b": dict(
        family="qwen3",
        num_layers=64,
        hidden_size=5120,
        ffn_hidden_size=25_600,
        num_attention_heads=64,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=151_936,
        tie_embeddings=False,
        qk_layernorm=True,
        rotary_base=1_000_000.0,
        max_position_embeddings=40_960,
    ),
    # Qwen3-MoE: 128 experts of width 768, top-8 with renormalised scores, 30.5B parameters, 3.3B active
    "qwen3_30b_a3b": dict(
        family="qwen3",
        num_layers=48,
        hidden_size=2048,
        ffn_hidden_size=6144,
        num_attention_heads=32,
        num_query_groups=4,
        kv_channels=128,
        vocab_size=151_936,
        tie_embeddings=False,
        qk_layernorm=True,
        rotary_base=1_000_000.0,
        max_position_embeddings=40_960,
        num_experts=128,
        moe_ffn_hidden_size=768,
        moe_router_topk=8,
        moe_router_topk_norm=True,
        moe_aux_loss_coeff=1e-3,
    ),
    "llama31_8b": dict(
        family="llama3",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14_336,
        num_attention_heads=32,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=128_256,
        tie_embeddings=False,
        qk_layernorm=False,
        rotary_base=500_000.0,
        norm_epsilon=1e-5,
        max_position_embeddings=131_072,
        rope_scaling="llama3",
        rope_scaling_factor=8.0,
        rope_original_max_position_embeddings=8192,
    ),
}

# The context each base model's RoPE was trained at (Qwen3: 32K pretraining, 40,960 positions in config;
# Llama 3.1: 8K base, scaled x8 to 128K by its llama3 RoPE scaling).
NATIVE_CONTEXT = {
    "qwen3_1p7b": 32_768,
    "qwen3_8b": 32_768,
    "qwen3_32b": 32_768,
    "qwen3_30b_a3b": 32_768,
    "llama31_8b": 131_072,
}

BASE_MODEL_DIRS = {
    "qwen3_1p7b": "models/Qwen3-1.7B-Base",
    "qwen3_8b": "models/Qwen3-8B-Base",
    "qwen3_32b": "models/Qwen3-32B-Base",
    "qwen3_30b_a3b": "models/Qwen3-30B-A3B-Base",
    "llama31_8b": "models/Llama-3.1-8B",
}


def model_shape(shape: str) -> ModelConfig:
    """The published ModelConfig for a shape name in SHAPES."""
    return ModelConfig(**SHAPES[shape])


def abf_rotary_base(base: float, from_context: int, to_context: int) -> float:
    """RoPE base for a longer context by "adjusted base frequency", following ProLong's schedule.

    ProLong took Llama-3's 5e5 @ 8K to 8e6 @ 64K and 1.28e8 @ 512K: x16 per x8 of context, i.e. the base
    grows as context^(4/3). Rounded to two significant digits so recipes print readable numbers.
    """
    raw = base * (to_context / from_context) ** (4.0 / 3.0)
    return float(f"{raw:.2g}")


def extend_context(m: ModelConfig, shape: str, seq_length: int) -> ModelConfig:
    """The shape with positions for ``seq_length``: Llama-3.1 raises its llama3 factor (same 8K base
    period); Qwen3 raises the RoPE base (ABF). Returns ``m`` unchanged at or below the native context."""
    native = NATIVE_CONTEXT[shape]
    m.max_position_embeddings = max(m.max_position_embeddings, seq_length)
    if seq_length <= native:
        return m
    if m.rope_scaling == "llama3":
        m.rope_scaling_factor = m.rope_scaling_factor * seq_length / native
    else:
        m.rotary_base = abf_rotary_base(SHAPES[shape]["rotary_base"], native, seq_length)
    return m


def midtrain_config(shape: str, seq_length: int = SEQ_256K, name: str | None = None) -> TrainConfig:
    """Base of every real-size midtraining recipe: shape, extended RoPE, optimizer, data, checkpoints."""
    name = name or f"{shape}_{seq_length // 1024}k"
    cfg = TrainConfig(name=name, run_dir=f"runs/{name}", init_from=BASE_MODEL_DIRS[shape])
    cfg.model = extend_context(model_shape(shape), shape, seq_length)
    cfg.data.seq_length = seq_length
    cfg.data.path = f"shards/swe_{seq_length // 1024}k"
    # Continued pretraining from a released base: a low peak LR, WSD so any checkpoint before the decay
    # can be branched, ~16.8M tokens per step at 256K (64 sequences).
    cfg.optim.lr = 3e-5
    cfg.optim.min_lr = 3e-6
    cfg.optim.warmup_steps = 200
    cfg.optim.decay_style = "wsd"
    cfg.optim.wsd_decay_fraction = 0.2
    cfg.optim.global_batch_size = max(1, 64 * SEQ_256K // seq_length)
    cfg.optim.train_steps = 30_000  # ~500B tokens at 256K x 64
    cfg.precision.dtype = "bf16"
    cfg.precision.transformer_impl = "transformer_engine"  # CP and THD attention need TE
    cfg.parallel.distributed_optimizer = True
    cfg.checkpoint.save_interval = 500
    cfg.checkpoint.keep_last = 3
    return cfg


def variant(cfg: TrainConfig, name: str, **changes: Any) -> TrainConfig:
    """A recipe derived by deltas: a new name/run_dir plus typed field changes (``Config.replace``)."""
    return cfg.replace(name=name, run_dir=f"runs/{name}", **changes)


# -- Qwen3-1.7B: fits a node as pure context parallelism ------------------------------------------------


@recipe("train")
def qwen3_1p7b_256k_h200() -> TrainConfig:
    """Qwen3-1.7B-shaped midtraining at 256K on H200 nodes (CP=8 per node)."""
    return variant(
        midtrain_config("qwen3_1p7b"),
        "qwen3_1p7b_256k_h200",
        parallel={"context": 8, "recompute": "none"},
        optim={"global_batch_size": 32},
    )


@recipe("train")
def qwen3_1p7b_256k_h100() -> TrainConfig:
    """Qwen3-1.7B-shaped midtraining at 256K on H100 nodes (CP=8, full recompute)."""
    return variant(qwen3_1p7b_256k_h200(), "qwen3_1p7b_256k_h100", parallel={"recompute": "full"})


# -- Qwen3-8B -----------------------------------------------------------------------------------------


@recipe("train")
def qwen3_8b_256k_h200() -> TrainConfig:
    """Qwen3-8B-shaped midtraining at 256K on H200 nodes (TP=2 x CP=4, sequence parallel)."""
    return variant(
        midtrain_config("qwen3_8b"),
        "qwen3_8b_256k_h200",
        parallel={"tensor": 2, "context": 4, "sequence_parallel": True, "recompute": "full"},
    )


@recipe("train")
def qwen3_8b_256k_h100() -> TrainConfig:
    """Qwen3-8B-shaped midtraining at 256K on H100 nodes (TP=2 x CP=8 over two nodes)."""
    return variant(qwen3_8b_256k_h200(), "qwen3_8b_256k_h100", parallel={"context": 8})


# -- Qwen3-32B ----------------------------------------------------------------------------------------


@recipe("train")
def qwen3_32b_256k_h200() -> TrainConfig:
    """Qwen3-32B-shaped midtraining at 256K on H200 nodes (TP=8 x CP=2 over two nodes)."""
    return variant(
        midtrain_config("qwen3_32b"),
        "qwen3_32b_256k_h200",
        parallel={"tensor": 8, "context": 2, "sequence_parallel": True, "recompute": "full"},
    )


@recipe("train")
def qwen3_32b_256k_h100() -> TrainConfig:
    """Qwen3-32B-shaped midtraining at 256K on H100 nodes (TP=8 x CP=4 over four nodes)."""
    return variant(qwen3_32b_256k_h200(), "qwen3_32b_256k_h100", parallel={"context": 4})


# -- Qwen3-30B-A3B (mixture of experts) ----------------------------------------------------------------


@recipe("train")
def qwen3_30b_a3b_256k_h200() -> TrainConfig:
    """Qwen3-30B-A3B-shaped MoE midtraining at 256K on H200 nodes (CP=8, EP=8 folded over CP, full recompute)."""
    return variant(
        midtrain_config("qwen3_30b_a3b"),
        "qwen3_30b_a3b_256k_h200",
        parallel={"context": 8, "expert": 8, "expert_tensor": 1, "recompute": "full"},
    )


@recipe("train")
def qwen3_30b_a3b_256k_h100() -> TrainConfig:
    """Qwen3-30B-A3B-shaped MoE midtraining at 256K on H100 nodes (TP=2 x CP=8, EP=16 over two nodes)."""
    return variant(
        qwen3_30b_a3b_256k_h200(),
        "qwen3_30b_a3b_256k_h100",
        parallel={"tensor": 2, "sequence_parallel": True, "expert": 16},
    )


# -- Llama-3.1-8B -------------------------------------------------------------------------------------


@recipe("train")
def llama31_8b_256k_h200() -> TrainConfig:
    """Llama-3.1-8B-shaped midtraining at 256K on H200 nodes (TP=2 x CP=4; llama3 RoPE factor 16)."""
    return variant(
        midtrain_config("llama31_8b"),
        "llama31_8b_256k_h200",
        parallel={"tensor": 2, "context": 4, "sequence_parallel": True, "recompute": "full"},
    )


@recipe("train")
def llama31_8b_256k_h100() -> TrainConfig:
    """Llama-3.1-8B-shaped midtraining at 256K on H100 nodes (TP=2 x CP=8 over two nodes)."""
    return variant(llama31_8b_256k_h200(), "llama31_8b_256k_h100", parallel={"context": 8})
