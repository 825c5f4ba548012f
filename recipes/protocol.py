"""The fixed SFT probe and the evaluation protocols that run it on every checkpoint they compare.

A probe recipe pins data, steps, LR schedule, batch and seed; a protocol names the checkpoints (baseline
first) and reuses one probe recipe for all of them, so differences come from midtraining alone.
"""

from midtrain.protocol import ProtocolConfig
from midtrain.sft.config import SFTConfig
from recipes import recipe
from recipes.demo import demo_tiny
from recipes.models import qwen3_8b_256k_h200


@recipe("sft")
def sft_probe_demo() -> SFTConfig:
    """Fixed SFT probe for the tiny demo model: demo traces, 8 steps, assistant-only loss (CPU, under a minute)."""
    train = demo_tiny()
    train.name = "sft_probe_demo"
    train.run_dir = ".demo/runs/sft_probe_demo"
    train.seed = 4321
    train.data.seed = 4321
    # the demo traces are short: 512-token bins hold them in 3 sequences, so each probe seed trains on its own
    # order (at 1K, seeds 4321 and 4322 fed the same documents in the same order: the sweep's noise band read
    # ±0.000), and a step costs half a 1K one (the 151,936-way output layer, linear in tokens). 8 steps see
    # each of the 3 sequences at least twice and move the held-out loss as 12 did, at two thirds of the time
    train.data.seq_length = 512
    train.optim.train_steps = 8
    train.optim.warmup_steps = 2
    train.optim.lr = 1e-3
    train.optim.min_lr = 1e-4
    train.optim.decay_style = "cosine"
    train.optim.global_batch_size = 1
    train.checkpoint.save_interval = 8
    train.checkpoint.keep_last = 1
    train.log.tensorboard = False
    # held out: the trace set's recorded split (valid_fraction=null; no pack of the set trains on it)
    return SFTConfig(name="sft_probe_demo", traces=[".demo/prep/traces"], train=train)


@recipe("sft")
def sft_probe_qwen3_8b() -> SFTConfig:
    """Fixed SFT probe for Qwen3-8B-shaped checkpoints: agent traces at 64K, 400 steps x 32, cosine 1e-5 (H200)."""

    train = qwen3_8b_256k_h200().replace(
        name="sft_probe_qwen3_8b",
        run_dir="runs/sft_probe_qwen3_8b",
        init_from=None,
        seed=4321,
        data={"seed": 4321, "seq_length": 65536},
        optim={
            "lr": 1e-5,
            "min_lr": 1e-6,
            "decay_style": "cosine",
            "warmup_steps": 20,
            "train_steps": 400,
            "global_batch_size": 32,
        },
        checkpoint={"save_interval": 100, "keep_last": 1},
    )
    # pieces padded to 2*CP*TP (sequence parallel with context parallelism)
    pad = 2 * train.parallel.context * train.parallel.tensor
    return SFTConfig(name="sft_probe_qwen3_8b", traces=["out/prep/traces"], pad_multiple=pad, train=train)


@recipe("protocol")
def protocol_demo() -> ProtocolConfig:
    """Demo protocol: probe + proxy evals of the tiny model before (step 0) and after midtraining."""
    cfg = ProtocolConfig(
        name="demo",
        output=".demo/runs/protocol",
        checkpoints={"base": ".demo/runs/demo_tiny_base", "midtrained": ".demo/runs/demo_tiny"},
        baseline="base",
        sft_recipe="sft_probe_demo",
        evals=["proxy"],
        report_dir=".demo/report",
        notes={
            "base": "demo_tiny's step-0 initialisation (the weights midtraining started from)",
            "midtrained": "demo_tiny after its midtraining run on the demo shards",
        },
    )
    cfg.proxy.shards = ".demo/shards"
    # the demo shards' first held-out sequences: one holding the small sources (build logs, PRs, traces), then
    # commits: 4 of them score every source there at half the cost of 8 (2048 tokens' full logits each)
    cfg.proxy.max_sequences = 4
    cfg.proxy.retrieval.repos = ".demo/prep/repos"
    cfg.proxy.retrieval.lengths = [256, 512, 1024, 2048]
    cfg.proxy.retrieval.depths = [0.0, 0.25, 0.5, 0.75, 1.0]
    cfg.proxy.retrieval.samples = 1
    return cfg


@recipe("protocol")
def protocol_swebench() -> ProtocolConfig:
    """Cluster protocol: probe, proxy evals, lm-eval (code, RULER) and SWE-bench (Verified, Multilingual, Pro)."""
    cfg = protocol_demo()
    cfg.name = "swebench"
    cfg.sft_recipe = "sft_probe_qwen3_8b"
    cfg.output = "runs/protocol_swebench"
    cfg.report_dir = None
    cfg.checkpoints = {"base": "runs/base", "midtrained": "runs/midtrained"}  # override with checkpoints.NAME=PATH
    cfg.notes = {"base": "the released base model", "midtrained": "the base model after midtraining"}
    cfg.evals = ["proxy", "lm_eval", "swebench"]
    # lm-evaluation-harness on the checkpoint's HF export: code generation and RULER needle retrieval
    cfg.lm_eval.tasks = ["humaneval", "mbpp", "niah_single_2"]
    cfg.lm_eval.allow_code_execution = True  # humaneval/mbpp run the model's code (in the job's sandbox)
    cfg.lm_eval.device = "cuda"
    cfg.lm_eval.dtype = "bfloat16"
    cfg.lm_eval.batch_size = 8
    cfg.lm_eval.max_length = 131072
    cfg.lm_eval.max_seq_lengths = [8192, 32768, 131072]
    cfg.proxy.shards = "out/shards"
    cfg.proxy.max_sequences = 512
    cfg.proxy.retrieval.repos = "out/prep/repos"
    cfg.proxy.retrieval.lengths = [8192, 32768, 65536, 131072, 262144]
    cfg.proxy.retrieval.samples = 8
    return cfg
