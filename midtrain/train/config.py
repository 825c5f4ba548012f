"""Training run configuration: model shape, parallel layout, precision, optimizer, data, checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from midtrain.config import Config, ConfigError, require
from midtrain.locations import is_url
from midtrain.train.model_config import ModelConfig


@dataclass
class ParallelConfig(Config):
    tensor: int = 1
    pipeline: int = 1
    context: int = 1
    data: int | None = None  # None = world_size // (tensor * pipeline * context), checked at launch
    # MoE: experts are split over `expert` ranks (taken from data x context x tensor, megatron's parallel
    # folding) and each expert's weights over `expert_tensor` ranks (None = same as tensor).
    expert: int = 1
    expert_tensor: int | None = None
    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    # selective: modules whose recompute saves memory (train.gpu_choices.selective_recompute_modules)
    recompute: Literal["none", "selective", "full"] = "none"

    def check(self) -> None:
        for name in ("tensor", "pipeline", "context", "expert"):
            require(getattr(self, name) >= 1, name, "must be >= 1")
        require(
            self.expert_tensor is None or self.expert_tensor >= 1,
            "expert_tensor",
            "must be >= 1 (or null: same as tensor)",
        )
        require(self.data is None or self.data >= 1, "data", "must be >= 1 (or null: derived from world size)")
        require(not self.sequence_parallel or self.tensor > 1, "sequence_parallel", "needs tensor > 1")

    @property
    def model_parallel_size(self) -> int:
        return self.tensor * self.pipeline * self.context

    @property
    def expert_tensor_size(self) -> int:
        """Ranks each expert's weights are split over (expert_tensor, or the dense tensor size when unset)."""
        return self.tensor if self.expert_tensor is None else self.expert_tensor


@dataclass
class PrecisionConfig(Config):
    """Numerics: parameter dtype, and FP8 through Transformer Engine (GPU only)."""

    dtype: Literal["bf16", "fp32"] = "bf16"
    # Transformer layer implementation: auto = TE when it imports (GPU), else the local spec with the
    # portable document-masked attention.
    transformer_impl: Literal["auto", "transformer_engine", "local"] = "auto"
    # The local spec's document-masked attention (midtrain/train/attention.py): auto = one varlen flash call
    # per packed sequence where torch can (CUDA, bf16/fp16), else one SDPA call per document.
    portable_attention: Literal["auto", "varlen", "per_document"] = "auto"
    fp8: Literal["none", "e4m3", "hybrid"] = "none"  # FP8 format (hybrid = e4m3 fwd, e5m2 bwd)
    fp8_recipe: Literal["delayed", "tensorwise", "blockwise", "mxfp8"] = "tensorwise"  # scaling recipe
    fp8_amax_history_len: int = 1024  # delayed scaling only
    fp8_bf16_first_layers: int = 1  # layers kept in BF16 at the start of the stack (0 = none)
    fp8_bf16_last_layers: int = 1  # ... and at the end

    def check(self) -> None:
        fp8 = self.fp8 != "none"
        require(
            not fp8 or self.transformer_impl != "local",
            "fp8",
            "FP8 needs Transformer Engine (transformer_impl=auto or transformer_engine), not local",
        )
        require(not fp8 or self.dtype == "bf16", "dtype", "FP8 training keeps master weights in bf16: set dtype=bf16")
        require(
            self.fp8_bf16_first_layers >= 0 and self.fp8_bf16_last_layers >= 0, "fp8_bf16_first_layers", "must be >= 0"
        )
        require(
            not (fp8 and self.fp8_recipe == "delayed" and (self.fp8_bf16_first_layers or self.fp8_bf16_last_layers)),
            "fp8_recipe",
            "delayed scaling cannot keep first/last layers in BF16 (megatron-core): set "
            "fp8_bf16_first_layers=0 fp8_bf16_last_layers=0 or use tensorwise/blockwise/mxfp8",
        )
        require(self.fp8_amax_history_len >= 1, "fp8_amax_history_len", "must be >= 1")


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
    global_batch_size: int = 4  # sequences per step over all data-parallel ranks (micro-batch is 1, THD)
    # A resume whose schedule (SCHEDULE_FIELDS) differs from the checkpoint's, as Megatron-LM's trainer decides
    # it: strict = refused naming the fields; config = this config's schedule from the checkpoint's step on (an
    # extension: WSD's decay moves to the new last steps); checkpoint = the checkpoint's schedule, config ignored.
    schedule_on_resume: Literal["strict", "config", "checkpoint"] = "strict"

    def check(self) -> None:
        require(self.lr >= 0, "lr", "must be >= 0 (0: no update, a sweep's null arm)")
        require(0 <= self.min_lr <= self.lr, "min_lr", f"must be in [0, lr={self.lr}]")
        require(self.train_steps > 0, "train_steps", "must be positive")
        require(0 <= self.warmup_steps <= self.train_steps, "warmup_steps", "must be in [0, train_steps]")
        require(0.0 <= self.wsd_decay_fraction <= 1.0, "wsd_decay_fraction", "must be in [0, 1]")
        require(self.global_batch_size > 0, "global_batch_size", "must be positive")


# The optimizer fields that make up the LR/WD schedule a checkpoint records (train.resume.check_resumable).
SCHEDULE_FIELDS = ("lr", "min_lr", "warmup_steps", "decay_style", "wsd_decay_fraction", "weight_decay", "train_steps")


@dataclass
class DataConfig(Config):
    path: str = ".demo/shards"  # a `midtrain pack` output directory on a filesystem every rank reads
    seq_length: int = 2048
    seed: int = 1234  # sample order (epochs reshuffle from it)

    def check(self) -> None:
        require(self.seq_length > 0, "seq_length", "must be positive")
        # Every rank memory-maps the shards: they must be files, not objects. Packing into a bucket is fine;
        # training reads a copy on a shared (or node-local) filesystem.
        require(
            not is_url(self.path),
            "path",
            f"{self.path} is in object storage, and the trainer memory-maps shards from a filesystem: copy "
            f"them to a shared filesystem first, e.g. `aws s3 sync {self.path.rstrip('/')} /lustre/shards` "
            "(any S3 client; the whole directory, manifest.json included), then set data.path=/lustre/shards",
        )


@dataclass
class CheckpointConfig(Config):
    save_interval: int = 50
    keep_last: int = 2
    save_final: bool = True  # also save at the last step
    # Write checkpoints in a background process while training continues (megatron dist_checkpointing's
    # async save): for runs where a save takes minutes. A checkpoint counts once its writes are finished.
    async_save: bool = False

    def check(self) -> None:
        require(self.save_interval > 0, "save_interval", "must be positive")
        require(self.keep_last >= 1, "keep_last", "must be >= 1")


@dataclass
class LogConfig(Config):
    interval: int = 1  # console line every N steps (metrics.jsonl and TensorBoard get every step)
    tensorboard: bool = True
    wandb_project: str | None = None  # W&B is optional: logged only when set and wandb imports
    peak_tflops: float | None = None  # per device, for MFU; None = looked up from the GPU name (CPU: none)

    def check(self) -> None:
        require(self.interval >= 1, "interval", "must be >= 1")


@dataclass
class GuardConfig(Config):
    on_nonfinite: Literal["stop", "skip"] = "stop"  # NaN/Inf loss or grad norm: stop, or skip the update
    max_skipped: int = 10  # stop anyway after this many skipped steps in a row

    def check(self) -> None:
        require(self.max_skipped >= 1, "max_skipped", "must be >= 1")


@dataclass
class TrainConfig(Config):
    name: str = "run"
    run_dir: str = "runs/run"
    seed: int = 1234
    # Weights only (fresh optimizer and step): a midtrain run dir / checkpoint dir, or a Hugging Face
    # model directory (one with config.json).
    init_from: str | None = None
    # init_from a midtrain checkpoint holding tensors this model lacks (q/k layernorm, say): refused unless true
    init_from_drop_unused: bool = False
    model: ModelConfig = field(default_factory=ModelConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    log: LogConfig = field(default_factory=LogConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)

    def save_yaml(self, path: str | Path) -> None:
        """Write atomically, ending with END_OF_CONFIG: a reader can tell the whole file (read_run_config)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(self.to_yaml() + END_OF_CONFIG + "\n")
        tmp.replace(path)

    def in_one_process(self) -> TrainConfig:
        """The same model for one process (scoring, conversion): no model, data or expert parallelism, no FP8.
        dist_checkpointing stores global tensors, so a checkpoint saved at any layout loads into it."""
        return self.replace(
            parallel={
                "tensor": 1,
                "pipeline": 1,
                "context": 1,
                "sequence_parallel": False,
                "data": None,
                "expert": 1,
                "expert_tensor": None,
            },
            precision={"fp8": "none"},
        )

    def check(self) -> None:
        _check_layout(self)
        if self.precision.fp8 != "none":
            self._check_fp8_shapes()

    def _check_fp8_shapes(self) -> None:
        """Transformer Engine's FP8 GEMMs need the token dimension of every rank's activations to be a multiple
        of 8 and the hidden (inner) dimension a multiple of 16; otherwise the first GEMM fails mid-run."""
        p, m = self.parallel, self.model
        split = p.context * (p.tensor if p.sequence_parallel else 1)
        tokens = self.data.seq_length // split
        require(
            self.data.seq_length % split == 0 and tokens % 8 == 0,
            "data.seq_length",
            f"{self.data.seq_length} tokens give {self.data.seq_length / split:g} per rank (over context="
            f"{p.context}"
            + (f" x tensor={p.tensor} sequence-parallel" if p.sequence_parallel else "")
            + "); FP8 GEMMs need a multiple of 8: pick a seq_length that is a multiple of "
            + str(8 * split),
        )
        require(
            m.hidden_size % 16 == 0,
            "model.hidden_size",
            f"{m.hidden_size} is not a multiple of 16, which FP8 GEMMs need (or set precision.fp8=none)",
        )
        # TE asserts the weights too (assert_dim_for_fp8_exec: all dims but the last % 8, the last % 16): the
        # row-parallel fc2 and proj take ffn/tp and heads*head_dim/tp inputs, the fused QKV has (heads+2*groups)
        # *head_dim/tp outputs. An MoE model's MLPs are its experts (split over expert_tensor) and shared expert.
        tp, hd = p.tensor, m.head_dim
        widths = (
            [
                ("model.moe_ffn_hidden_size", m.moe_ffn_hidden_size, p.expert_tensor_size),
                ("model.moe_shared_expert_ffn_hidden_size", m.moe_shared_expert_ffn_hidden_size, tp),
            ]
            if m.is_moe
            else [("model.ffn_hidden_size", m.ffn_hidden_size, tp)]
        )
        for name, width, split in widths:
            require(
                width is None or width % (16 * split) == 0,
                name,
                f"{width} / {split} tensor-parallel ranks is not a multiple of 16, which FP8 GEMMs need (the "
                "MLP's output projection takes that width)",
            )
        require(
            m.num_attention_heads * hd % (16 * tp) == 0,
            "model.num_attention_heads",
            f"num_attention_heads={m.num_attention_heads} x head_dim={hd} / tensor={tp} is not a multiple of "
            "16, which FP8 GEMMs need (the attention's output projection takes that width)",
        )
        require(
            (m.num_attention_heads + 2 * m.num_query_groups) * hd % (8 * tp) == 0,
            "model.num_query_groups",
            f"(num_attention_heads={m.num_attention_heads} + 2 x num_query_groups={m.num_query_groups}) x "
            f"head_dim={hd} / tensor={tp} is not a multiple of 8, which FP8 GEMMs need (the fused QKV's width)",
        )


# -- parallel layout: which TP/PP/CP/DP/SP/EP combinations can run (static; the world size is checked at
# launch by midtrain/train/layout.py) ---------------------------------------------------------------


def _check_layout(cfg: TrainConfig) -> None:
    m, p, prec = cfg.model, cfg.parallel, cfg.precision
    tp, pp, cp = p.tensor, p.pipeline, p.context
    require(
        cfg.data.seq_length <= m.max_position_embeddings,
        "data.seq_length",
        f"{cfg.data.seq_length} exceeds model.max_position_embeddings={m.max_position_embeddings}",
    )
    require(
        m.num_attention_heads % tp == 0,
        "parallel.tensor",
        f"num_attention_heads={m.num_attention_heads} is not divisible by tensor={tp}",
    )
    require(
        m.num_query_groups % tp == 0,
        "parallel.tensor",
        f"num_query_groups={m.num_query_groups} (key/value heads) is not divisible by tensor={tp}",
    )
    require(
        m.ffn_hidden_size % tp == 0,
        "parallel.tensor",
        f"ffn_hidden_size={m.ffn_hidden_size} is not divisible by tensor={tp}",
    )
    require(m.vocab_size % tp == 0, "parallel.tensor", f"vocab_size={m.vocab_size} is not divisible by tensor={tp}")
    require(m.num_layers % pp == 0, "parallel.pipeline", f"num_layers={m.num_layers} is not divisible by pipeline={pp}")
    if cp > 1:
        require(
            prec.transformer_impl != "local",
            "parallel.context",
            f"context={cp} needs Transformer Engine (THD + context parallel attention); "
            "precision.transformer_impl=local has no context parallelism",
        )
        require(
            cfg.data.seq_length % (2 * cp) == 0,
            "data.seq_length",
            f"{cfg.data.seq_length} is not divisible by 2*context={2 * cp} (load-balanced CP splits each "
            "sequence into 2*CP chunks)",
        )
    if p.sequence_parallel:
        require(
            prec.transformer_impl != "local",
            "parallel.sequence_parallel",
            "sequence parallelism needs Transformer Engine norms (the local spec's torch norms fail)",
        )
        mult = 2 * cp * tp if cp > 1 else tp
        require(
            cfg.data.seq_length % mult == 0,
            "data.seq_length",
            f"{cfg.data.seq_length} is not divisible by {mult} (sequence parallel splits the sequence over "
            f"tensor={tp}" + (f" after context={cp}" if cp > 1 else "") + ")",
        )
    if prec.fp8 != "none":
        n_bf16 = prec.fp8_bf16_first_layers + prec.fp8_bf16_last_layers
        require(
            n_bf16 < m.num_layers or prec.fp8_recipe == "delayed",
            "precision.fp8_bf16_first_layers",
            f"{n_bf16} BF16 layers leave no FP8 layer out of num_layers={m.num_layers}",
        )
        per_stage = m.num_layers // pp
        require(
            prec.fp8_bf16_first_layers <= per_stage and prec.fp8_bf16_last_layers <= per_stage,
            "precision.fp8_bf16_first_layers",
            f"at most {per_stage} (layers per pipeline stage)",
        )
    if p.data is not None:
        require(
            cfg.optim.global_batch_size % p.data == 0,
            "optim.global_batch_size",
            f"{cfg.optim.global_batch_size} is not divisible by parallel.data={p.data}",
        )
    _check_expert_layout(cfg)


def _check_expert_layout(cfg: TrainConfig) -> None:
    """Expert parallelism (EP) and expert-tensor parallelism (ETP) against the model and the dense layout.

    megatron-core folds the expert layout into the dense one: within a pipeline stage the
    tensor x context x data ranks are regrouped as expert_tensor x expert x expert-data, so EP x ETP must
    divide TP x CP x DP (the world size per pipeline stage).
    """
    m, p = cfg.model, cfg.parallel
    ep, etp = p.expert, p.expert_tensor_size
    if not m.is_moe:
        require(ep == 1, "parallel.expert", f"expert={ep} needs a mixture-of-experts model (model.num_experts)")
        require(
            p.expert_tensor in (None, p.tensor),
            "parallel.expert_tensor",
            "needs a mixture-of-experts model (model.num_experts)",
        )
        return
    assert m.num_experts is not None and m.moe_ffn_hidden_size is not None  # is_moe; ModelConfig.check needs both
    require(
        m.num_experts % ep == 0, "parallel.expert", f"model.num_experts={m.num_experts} is not divisible by expert={ep}"
    )
    require(
        m.moe_ffn_hidden_size % etp == 0,
        "parallel.expert_tensor",
        f"model.moe_ffn_hidden_size={m.moe_ffn_hidden_size} is not divisible by expert_tensor={etp}",
    )
    if m.moe_shared_expert_ffn_hidden_size:
        require(
            m.moe_shared_expert_ffn_hidden_size % p.tensor == 0,
            "parallel.tensor",
            f"model.moe_shared_expert_ffn_hidden_size={m.moe_shared_expert_ffn_hidden_size} is not "
            f"divisible by tensor={p.tensor}",
        )
    require(
        p.tensor == 1 or p.sequence_parallel,
        "parallel.sequence_parallel",
        f"MoE layers with tensor={p.tensor} need sequence_parallel=true (megatron-core refuses to train "
        "them otherwise)",
    )
    if p.data is not None:
        per_stage = p.tensor * p.context * p.data
        require(
            per_stage % (ep * etp) == 0,
            "parallel.expert",
            f"expert={ep} x expert_tensor={etp} = {ep * etp} does not divide tensor x context x data = "
            f"{p.tensor} x {p.context} x {p.data} = {per_stage} (the ranks of one pipeline stage)",
        )


# Fields a run cannot change when it resumes from its checkpoints: the parameters' shapes, their dtype (the
# optimizer's master copies), the optimizer's state layout, and the sample order.
RESUME_FIXED = tuple(
    f"model.{name}"
    for name in (
        "num_layers",
        "hidden_size",
        "ffn_hidden_size",
        "num_attention_heads",
        "num_query_groups",
        "kv_channels",
        "vocab_size",
        "qk_layernorm",
        "tie_embeddings",
        "num_experts",
        "moe_ffn_hidden_size",
        "moe_shared_expert_ffn_hidden_size",
    )
) + ("precision.dtype", "parallel.distributed_optimizer", "data.seed")


END_OF_CONFIG = "# end of midtrain config"  # the last line TrainConfig.save_yaml writes


def read_run_config(path: str | Path) -> TrainConfig:
    """A config.yaml written by midtrain (a run's, or `midtrain config --yaml-only`), read strictly: an empty
    file, or one cut short by a full disk or a killed writer (before writes were atomic), is refused naming
    what it lacks instead of reading back as the defaults.

    A file ending with END_OF_CONFIG is whole (fields added to midtrain since it was written take their
    defaults). Without that line (older runs, `config --yaml-only`) it is whole when it has every section and
    its last section has every field: a cut takes the end of the file.
    """

    path = Path(path)
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e}); a cut or damaged config") from None
    if not text.strip() or data is None:
        raise ConfigError(
            f"{path} is empty: a run's config.yaml lists every field (a full disk or a killed "
            "writer leaves an empty one); write it again from the recipe, or give the recipe name"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config sections, got {type(data).__name__}")
    if not text.rstrip().endswith(END_OF_CONFIG):
        full = TrainConfig().to_dict()
        missing = [k for k, v in full.items() if isinstance(v, dict) and data.get(k) is None]
        last = next(reversed(data))
        if isinstance(full.get(last), dict) and isinstance(data[last], dict):
            missing += [f"{last}.{k}" for k in full[last] if k not in data[last]]
        if missing:
            raise ConfigError(
                f"{path} lacks {', '.join(missing[:5])}"
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                + ": it is cut short (a run's config.yaml lists "
                "every field); write it again from the recipe, or give the recipe name"
            )
    return TrainConfig.from_dict(data)
