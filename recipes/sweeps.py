"""Sweep recipes: the paper's ablations as variants of one mixture and pack/train recipe through the fixed probe."""

from midtrain.sweep_config import SweepConfig, Variant
from recipes import recipe
from recipes.mixtures import swe_midtrain
from recipes.protocol import protocol_demo, protocol_swebench


@recipe("sweep")
def sweep_demo() -> SweepConfig:
    """Demo-scale ablations on CPU (minutes): pull requests without their context, leave commits out, context
    1K vs 2K, 2x tokens."""
    cfg = SweepConfig(
        name="sweep_demo",
        output=".demo/sweep",
        base=None,
        train_recipe="demo_tiny",
        inputs={s: f".demo/prep/{s}" for s in ("repos", "commits", "pulls", "buildlogs", "traces")},
        tokens=4_096,
        seed=1234,
    )  # 2 steps of one 2048-token sequence (demo_tiny's batch): enough to move every variant off the shared start
    cfg.pack.seq_length = 2048
    cfg.pack.valid_fraction = 0.1
    # Natural mixture (every source once): the demo's few, very unequal documents cannot meet share targets
    # (a 140K-token commit history cannot be sampled at 15% of 100K tokens); cluster sweeps set shares.
    cfg.train_overrides = ["optim.global_batch_size=1", "checkpoint.save_interval=1000", "log.tensorboard=false"]
    # The demo preps its sample pull requests joined with their clone (midtrain.demo.inputs.sample_pulls), so
    # `all` reads the changed files at the base commit; pr_context_none preps them again without. It replaces
    # no_traces, which trained on the very sequences `all` did (its score was all's to the last digit): the
    # demo's traces are 0.1% of its tokens and feed the probe anyway.
    cfg.raw_inputs = {"pulls": [".demo/prep/_inputs/pulls/records"]}
    cfg.variants = {
        "all": Variant(about="every source once"),
        "pr_context_none": Variant(
            about="pull requests without the files read at the base commit",
            prep={"pulls": ["pulls.repos=.demo/prep/_inputs/pulls/repos", "pulls.context=none"]},
        ),
        "no_commits": Variant(about="leave commits out", leave_out=["commits"]),
        "ctx_1k": Variant(about="context 1,024 instead of 2,048", pack=["seq_length=1024"]),
        "long": Variant(about="twice the midtraining tokens", tokens=8_192),
    }
    proto = protocol_demo()  # the sweep replaces its checkpoints, output, report dir and notes
    proto.proxy.shards = None  # the sweep's reference shards
    # the reference pack's first two held-out sequences: one of repository text, one of commits (the sources
    # the proxies are ranked on); each is 2048 tokens' full logits
    proto.proxy.max_sequences = 2
    proto.proxy.retrieval.lengths = [256, 512]
    proto.proxy.retrieval.depths = [0.0, 0.5, 1.0]
    proto.probe_seeds = [4321, 4322]  # two seeds: the noise band every ranking is read against
    # the demo evaluates no SWE-bench: skip the HF export; 4 probe steps (12 probes run: a third of the
    # sweep's time at 12 steps) still move the held-out loss the variants are ranked on, and the two seeds'
    # orders of the 3 probe sequences still differ (the noise band)
    proto.sft_overrides = ["export_hf=false", "train.optim.train_steps=4", "train.checkpoint.save_interval=4"]
    cfg.protocol = proto
    return cfg


@recipe("sweep")
def sweep_swe_ablations() -> SweepConfig:
    """The paper's ablations for Qwen3-8B at 32K: leave-one-source-out, trace share 0/5/10%, repo file order,
    pull-request context, length, 256K."""
    cfg = SweepConfig(
        name="swe_ablations",
        output="runs/sweep_swe_ablations",
        base="models/Qwen3-8B-Base",
        train_recipe="qwen3_8b_ctx_stage1_32k_h200",
        inputs={s: f"out/prep/{s}" for s in ("repos", "commits", "pulls", "buildlogs", "traces")},
        raw_inputs={"repos": ["out/raw/repos"], "pulls": ["out/raw/pulls"]},
        tokens=20_000_000_000,
        seed=1234,
    )
    cfg.pack.seq_length = 32_768
    cfg.pack.mixture = swe_midtrain()
    cfg.pack.tasks = 256
    cfg.pack.tokenize_tasks = 256
    cfg.variants = {"full": Variant(about="swe_midtrain mixture, 10% agent traces")}
    for source in cfg.inputs:
        cfg.variants[f"no_{source}"] = Variant(about=f"leave {source} out", leave_out=[source])
    for share in (0.0, 0.05):
        cfg.variants[f"traces_{int(share * 100)}"] = Variant(
            about=f"{share:.0%} agent traces", pack=[f"mixture.weights.trace={share}"]
        )
    # Repository file order: the repos source prepped again with import-dependency ordering off
    cfg.variants["repo_order_off"] = Variant(
        about="repository files in path order, not import order", prep={"repos": ["repos.file_order=path"]}
    )
    # Pull requests as the work went (pulls prepped with pulls.repos=out/raw/repos, the repositories' clones,
    # reading the changed files at the base commit): without that context, or with their imports read too
    for name, mode, about in (
        ("pr_context_none", "none", "pull requests without the files read at the base commit"),
        ("pr_context_imports", "files+imports", "pull requests reading the changed files' imports too"),
    ):
        cfg.variants[name] = Variant(
            about=about, prep={"pulls": ["pulls.repos=out/raw/repos", f"pulls.context={mode}"]}
        )
    cfg.variants["half_tokens"] = Variant(about="half the midtraining tokens", tokens=10_000_000_000)
    cfg.variants["ctx_256k"] = Variant(
        about="256K context instead of 32K (the 256K layout)",
        pack=["seq_length=262144", "pad_multiple=16"],
        train_recipe="qwen3_8b_256k_h200",
    )
    proto = protocol_swebench()  # the sweep replaces its checkpoints, output, report dir and notes
    proto.proxy.shards = None
    proto.probe_seeds = [4321, 4322, 4323]
    proto.proxy_seeds = [0, 1]
    cfg.protocol = proto
    return cfg
