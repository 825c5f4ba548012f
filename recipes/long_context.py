"""Context extension: a 32K -> 128K -> 256K progression as stages, and the YaRN alternative to a base change.

Long-context recipes (ProLong, Qwen2.5-Coder, Llama 3.1) do not jump to the final length: each stage trains
at a longer context from the previous stage's weights, with positions re-fitted for the new length. Here
each stage is its own recipe (so `midtrain train`, `midtrain submit` and `midtrain config` treat it like
any other) derived by deltas: stage k starts from stage k-1's run directory (`init_from`, weights only:
fresh optimizer and step), takes the RoPE base for its length (`models.extend_context`), a parallel
layout that fits at that length, and its share of the token budget. The last stage is the 256K recipe of
recipes/models.py itself. `progression_stages(NAME)` returns the ordered stage configs for a launcher.

RoPE fields travel into the exported Hugging Face config (`midtrain convert mcore2hf`), so inference
engines compute the same positions as training did.
"""

from __future__ import annotations

from typing import Any

from midtrain.config import ConfigError
from midtrain.train.config import TrainConfig
from recipes import recipe
from recipes.models import SEQ_256K, midtrain_config, qwen3_8b_256k_h200, variant


def _stage(shape: str, name: str, seq_length: int, init_from: str, **changes: Any) -> TrainConfig:
    cfg = midtrain_config(shape, seq_length, name=name)
    return variant(cfg, name, init_from=init_from, **changes)


# Token budget: ~16.8M tokens per step at every length (global batch x seq_length is kept constant).
# Short stages keep a constant LR after warmup (wsd with no decay); only the last stage decays.


@recipe("train")
def qwen3_8b_ctx_stage1_32k_h200() -> TrainConfig:
    """Progression stage 1/3: Qwen3-8B-shaped at 32K (native RoPE base), ~50B tokens, H200."""
    return _stage(
        "qwen3_8b",
        "qwen3_8b_ctx_stage1_32k_h200",
        32_768,
        "models/Qwen3-8B-Base",
        parallel={"recompute": "full"},
        optim={"train_steps": 3000, "wsd_decay_fraction": 0.0},
    )


@recipe("train")
def qwen3_8b_ctx_stage2_128k_h200() -> TrainConfig:
    """Progression stage 2/3: 128K from stage 1, RoPE base raised (ABF), ~50B tokens, H200."""
    return _stage(
        "qwen3_8b",
        "qwen3_8b_ctx_stage2_128k_h200",
        131_072,
        "runs/qwen3_8b_ctx_stage1_32k_h200",
        parallel={"tensor": 2, "context": 2, "sequence_parallel": True, "recompute": "full"},
        optim={"train_steps": 3000, "wsd_decay_fraction": 0.0},
    )


@recipe("train")
def qwen3_8b_ctx_stage3_256k_h200() -> TrainConfig:
    """Progression stage 3/3: 256K from stage 2 (the qwen3_8b_256k_h200 recipe), ~400B tokens, decays."""
    return variant(
        qwen3_8b_256k_h200(),
        "qwen3_8b_ctx_stage3_256k_h200",
        init_from="runs/qwen3_8b_ctx_stage2_128k_h200",
        optim={"train_steps": 24000},
    )


@recipe("train")
def qwen3_8b_256k_yarn_h200() -> TrainConfig:
    """Qwen3-8B-shaped at 256K with YaRN (factor 8 over the native 32K) instead of a RoPE base change."""
    return variant(
        qwen3_8b_256k_h200(),
        "qwen3_8b_256k_yarn_h200",
        model={
            "rotary_base": 1_000_000.0,
            "rope_scaling": "yarn",
            "rope_scaling_factor": 8.0,
            "rope_original_max_position_embeddings": 32768,
        },
    )


PROGRESSIONS: dict[str, list] = {
    "qwen3_8b_ctx_h200": [qwen3_8b_ctx_stage1_32k_h200, qwen3_8b_ctx_stage2_128k_h200, qwen3_8b_ctx_stage3_256k_h200],
}


def progression_stages(name: str) -> list[TrainConfig]:
    """The ordered stage configs of a progression; each stage's init_from is the previous run_dir."""
    if name not in PROGRESSIONS:
        raise ConfigError(f"unknown progression '{name}' (known: {', '.join(PROGRESSIONS)})")
    stages = [fn() for fn in PROGRESSIONS[name]]
    for prev, cur in zip(stages, stages[1:]):
        if cur.init_from != prev.run_dir:
            raise ConfigError(
                f"{cur.name}.init_from: {cur.init_from!r} is not the previous stage's run_dir {prev.run_dir!r}"
            )
    if stages[-1].data.seq_length != SEQ_256K:
        raise ConfigError(f"{stages[-1].name}: the last stage must train at {SEQ_256K}")
    return stages
