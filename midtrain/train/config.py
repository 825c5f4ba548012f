"""Training run configuration: model shape, parallel layout, precision, optimizer, data, checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from midtrain.config import Config, require


@dataclass
class ModelConfig(Config):
    """A GPT-family dense decoder in the Llama-3 / Qwen3 shape."""

    family: Literal["qwen3", "llama3"] = "qwen3"
    num_layers: int = 2
    hidden_size: int = 64
    ffn_hidden_size: int = 192
    num_attention_heads: int = 4
    num_query_groups: int = 2
    kv_channels: int | None = None  # head dim; None = hidden_size // num_attention_heads
    vocab_size: int = 151936
    max_position_embeddings: int = 4096
    rotary_base: float = 1_000_000.0
    qk_layernorm: bool = True
    tie_embeddings: bool = True
    norm_epsilon: float = 1e-6
    init_method_std: float = 0.02

    def check(self) -> None:
        require(self.num_layers > 0, "num_layers", "must be positive")
        require(self.hidden_size % self.num_attention_heads == 0 or self.kv_channels is not None,
                "hidden_size", f"{self.hidden_size} is not divisible by num_attention_heads="
                f"{self.num_attention_heads}; set kv_channels explicitly")
        require(self.num_attention_heads % self.num_query_groups == 0, "num_query_groups",
                f"num_attention_heads={self.num_attention_heads} must be a multiple of num_query_groups="
                f"{self.num_query_groups}")


@dataclass
class ParallelConfig(Config):
    tensor: int = 1
    pipeline: int = 1
    context: int = 1
    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    recompute: Literal["none", "selective", "full"] = "none"

    def check(self) -> None:
        for name in ("tensor", "pipeline", "context"):
            require(getattr(self, name) >= 1, name, "must be >= 1")
        require(not self.sequence_parallel or self.tensor > 1, "sequence_parallel", "needs tensor > 1")


@dataclass
class OptimConfig(Config):
    lr: float = 3e-4
    min_lr: float = 3e-5
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    clip_grad: float = 1.0
    warmup_steps: int = 10
    decay_style: Literal["wsd", "cosine", "constant"] = "wsd"
    wsd_decay_fraction: float = 0.2
    train_steps: int = 100
    global_batch_size: int = 4

    def check(self) -> None:
        require(self.lr > 0, "lr", "must be positive")
        require(0 <= self.min_lr <= self.lr, "min_lr", f"must be in [0, lr={self.lr}]")
        require(self.train_steps > 0, "train_steps", "must be positive")
        require(0 <= self.warmup_steps <= self.train_steps, "warmup_steps", "must be in [0, train_steps]")
        require(0.0 <= self.wsd_decay_fraction <= 1.0, "wsd_decay_fraction", "must be in [0, 1]")
        require(self.global_batch_size > 0, "global_batch_size", "must be positive")


@dataclass
class DataConfig(Config):
    path: str = ".demo/shards"  # a `midtrain pack` output directory
    seq_length: int = 2048
    seed: int = 1234

    def check(self) -> None:
        require(self.seq_length > 0, "seq_length", "must be positive")


@dataclass
class CheckpointConfig(Config):
    save_interval: int = 50
    keep_last: int = 2

    def check(self) -> None:
        require(self.save_interval > 0, "save_interval", "must be positive")
        require(self.keep_last >= 1, "keep_last", "must be >= 1")


@dataclass
class TrainConfig(Config):
    name: str = "run"
    run_dir: str = "runs/run"
    seed: int = 1234
    init_from: str | None = None  # a Hugging Face model directory to start from
    model: ModelConfig = field(default_factory=ModelConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def check(self) -> None:
        require(self.data.seq_length <= self.model.max_position_embeddings, "data.seq_length",
                f"{self.data.seq_length} exceeds model.max_position_embeddings="
                f"{self.model.max_position_embeddings}")
        require(self.model.num_attention_heads % self.parallel.tensor == 0, "parallel.tensor",
                f"num_attention_heads={self.model.num_attention_heads} is not divisible by "
                f"tensor={self.parallel.tensor}")
