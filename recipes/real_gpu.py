"""The real-model comparison at GPU scale, on one H200: ``sweep_real_gpu`` (docs/real_model.md, "On a GPU").

The CPU experiment (recipes/smollm2.py) at a size where the effects it could not resolve can show: Qwen3-1.7B-Base
read offline from a mounted path (``models/Qwen3-1.7B-Base``: ``midtrain convert hf2mcore`` it first), 200M
midtraining tokens per arm at 16K, the same pre-registered primary comparison over 5 midtraining seeds x 2 probe
seeds, a zero-LR null arm, and the probe scored on the held-out share of a real trajectory set (5% of a few
thousand trajectories: hundreds). Inputs are ``midtrain prep`` outputs under out/prep/ (repos, commits, traces);
the traces are a public agent-trajectory set prepped with ``midtrain prep traces`` (its licence in its card).
"""

from midtrain.eval.config import SweBenchConfig
from midtrain.protocol import ProtocolConfig
from midtrain.sft.config import SFTConfig
from midtrain.sweep_config import SweepConfig
from midtrain.train.config import TrainConfig
from recipes import recipe
from recipes.models import midtrain_config, variant

SEQ = 16_384
BASE = "models/Qwen3-1.7B-Base"
TOKENS = 200_000_000  # per midtraining arm: ~1,500 steps of 8 x 16K
SEEDS = (1234, 1235, 1236, 1237, 1238)
PROBE_STEPS = 200


@recipe("train")
def qwen3_1p7b_16k_h200x1() -> TrainConfig:
    """Qwen3-1.7B-Base midtrained at 16K on one H200 (native RoPE; bf16 with TE, no model parallelism)."""
    cfg = variant(
        midtrain_config("qwen3_1p7b", SEQ),
        "qwen3_1p7b_16k_h200x1",
        init_from="ckpt/qwen3-1.7b",
        parallel={"recompute": "selective", "distributed_optimizer": False},
        optim={"global_batch_size": 8, "warmup_steps": 50, "lr": 3e-5, "min_lr": 3e-6},
        checkpoint={"save_interval": 500, "keep_last": 1},
    )
    cfg.data.path = "shards/real_gpu"
    return cfg


@recipe("sft")
def sft_probe_qwen3_1p7b() -> SFTConfig:
    """Fixed SFT probe for Qwen3-1.7B checkpoints: the trace set's training share at 16K, 200 steps x 8, cosine."""
    train = qwen3_1p7b_16k_h200x1().replace(
        name="sft_probe_qwen3_1p7b",
        run_dir="runs/sft_probe_qwen3_1p7b",
        init_from=None,
        seed=4321,
        data={"seed": 4321},
        optim={"lr": 1e-5, "min_lr": 1e-6, "decay_style": "cosine", "warmup_steps": 10, "train_steps": PROBE_STEPS},
        checkpoint={"save_interval": PROBE_STEPS, "keep_last": 1},
    )
    return SFTConfig(
        name="sft_probe_qwen3_1p7b",
        traces=["out/prep/traces"],
        tokenizer=f"{BASE}",
        valid_fraction=0.05,
        train=train,
        command_turns=4,
    )


@recipe("sweep")
def sweep_real_gpu() -> SweepConfig:
    """The pre-registered comparison on one H200: Qwen3-1.7B-Base without midtraining vs midtrained on all sources
    (200M tokens) over 5 midtraining seeds, and a zero-LR null arm; each through the probe over 2 seeds."""
    cfg = SweepConfig(
        name="sweep_real_gpu",
        output="runs/sweep_real_gpu",
        base="ckpt/qwen3-1.7b",
        train_recipe="qwen3_1p7b_16k_h200x1",
        inputs={s: f"out/prep/{s}" for s in ("repos", "commits", "traces")},
        tokens=TOKENS,
        seed=SEEDS[0],
    )
    cfg.pack.seq_length = SEQ
    cfg.pack.tokenizer = BASE
    cfg.pack.valid_fraction = 0.01
    cfg.pack.heldout_fraction = 0.05  # the probe's held-out trajectories: 5% by instance
    cfg.pack.valid_decontam_ngrams = 13
    cfg.pack.tasks = 16
    cfg.pack.tokenize_tasks = 16
    cfg.pre_register(
        "all_sources",
        "code, commit histories and agent traces (natural mixture)",
        SEEDS,
        "midtraining Qwen3-1.7B-Base on 200M tokens of code, commit histories and agent traces lowers the SFT "
        "probe's held-out assistant-token loss against the same probe from the base model",
        null_tokens=8 * SEQ,
    )
    proto = ProtocolConfig(
        name="real_gpu",
        checkpoints={"no_midtraining": cfg.base or ""},
        sft_recipe="sft_probe_qwen3_1p7b",
        evals=["proxy", "swebench"],
    )
    proto.proxy.max_sequences = 256
    proto.proxy.retrieval.repos = None
    proto.probe_seeds = [4321, 4322]
    # the agent leg in the format the probe teaches (text actions, as the CPU experiment), on the embedded
    # tasks, which no training split holds
    proto.swebench = SweBenchConfig(
        benchmarks=["local"], max_steps=20, max_context=SEQ, max_output_tokens=1024, action_format="text"
    )
    cfg.protocol = proto
    return cfg
