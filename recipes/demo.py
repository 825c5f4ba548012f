"""The embedded CPU default: a tiny Qwen3-shaped model on the demo's shards."""

from midtrain.train.config import TrainConfig
from recipes import recipe


@recipe("train")
def demo_tiny() -> TrainConfig:
    """Tiny Qwen3-shaped model trained on CPU on the demo shards (minutes; `midtrain train` builds the shards if missing)."""  # noqa: E501 (its first line is the recipe's listing)
    cfg = TrainConfig(name="demo_tiny", run_dir=".demo/runs/demo_tiny")
    # Qwen3 shape (RMSNorm, SwiGLU, GQA 4:2, QK-norm, tied embeddings, Qwen's 151,936-id vocabulary), tiny.
    cfg.model.family = "qwen3"
    cfg.model.num_layers = 2
    cfg.model.hidden_size = 64
    cfg.model.ffn_hidden_size = 192
    cfg.model.num_attention_heads = 4
    cfg.model.num_query_groups = 2
    cfg.model.max_position_embeddings = 4096
    cfg.precision.dtype = "fp32"  # CPU
    cfg.data.path = ".demo/shards"
    cfg.data.seq_length = 2048
    cfg.optim.lr = 3e-3
    cfg.optim.min_lr = 3e-4
    # 10 steps of one 2048-token sequence: the loss falls clear of the step-0 model's, what the demo's report
    # compares (0.7 to 1.2 nats lower on every held-out source, 1.1 on the probe; 20 steps gave 2 to 3 at twice
    # the time). A step's cost is the 151,936-way output layer, linear in its tokens, so one sequence a step
    # halves every demo training (data-parallel runs set a batch of 2 or more)
    cfg.optim.train_steps = 10
    cfg.optim.warmup_steps = 4
    cfg.optim.global_batch_size = 1
    cfg.checkpoint.save_interval = 10
    cfg.log.interval = 5
    return cfg


@recipe("train")
def demo_tiny_moe() -> TrainConfig:
    """demo_tiny as a Qwen3-MoE-shaped model: 4 experts, top-2, load-balancing loss (CPU, minutes)."""
    return demo_tiny().replace(
        name="demo_tiny_moe",
        run_dir=".demo/runs/demo_tiny_moe",
        model={"num_experts": 4, "moe_ffn_hidden_size": 96, "moe_router_topk": 2, "moe_aux_loss_coeff": 0.01},
        # two sequences: expert parallelism over 2 ranks is data-parallel over them;
        # a 2-step warmup, so a run of 2 steps (the docs' MoE examples: each step is
        # two sequences through one MLP per expert on CPU) is a valid schedule
        optim={"global_batch_size": 2, "warmup_steps": 2},
    )
