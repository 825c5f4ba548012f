"""The embedded CPU default: a tiny Qwen3-shaped model on the demo's shards."""

from midtrain.train.config import TrainConfig
from recipes import recipe


@recipe("train")
def demo_tiny() -> TrainConfig:
    """Tiny Qwen3-shaped model trained on CPU on the demo shards (minutes)."""
    cfg = TrainConfig(name="demo_tiny", run_dir=".demo/runs/demo_tiny")
    cfg.data.seq_length = 2048
    cfg.optim.train_steps = 60
    cfg.optim.warmup_steps = 6
    cfg.optim.global_batch_size = 2
    cfg.checkpoint.save_interval = 20
    return cfg
