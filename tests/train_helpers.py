"""Shared helpers for the trainer tests (tests/test_train_*.py): tiny configs and packed batches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from midtrain.train import distributed
from midtrain.train.config import TrainConfig


# Fixtures the trainer test modules import (`from train_helpers import shards, destroy_process_groups`):
# importing an autouse fixture applies it to every test of the importing module only.
@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """A tiny packed shard dir shared by a module's tests."""
    return write_shards(tmp_path_factory.mktemp("shards"), sequences=24, seq_length=64)


@pytest.fixture(autouse=True)
def destroy_process_groups():
    """No test leaves a process group behind for the next one."""
    yield
    distributed.destroy()


def metrics(run_dir: Path) -> list[dict]:
    """Every line of RUN_DIR/metrics.jsonl, read strictly: a partial or malformed line fails the test."""
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def train_in_process(cfg: TrainConfig, run_dir: Path, *overrides: str, **fields: object) -> dict:
    """Train CFG into RUN_DIR in this process (``key=value`` OVERRIDES, or FIELDS as keywords), then take the
    process group down so the next run in the test starts afresh; train()'s result."""
    from midtrain.train.trainer import train

    given = [f"run_dir={run_dir}", *overrides, *(f"{k}={v}" for k, v in fields.items())]
    result = train(cfg.apply_overrides(given))
    distributed.destroy()
    return result


def tiny_config(**overrides: object) -> TrainConfig:
    """A tiny fp32 Qwen3-shaped model with a small vocabulary (fast on CPU)."""
    cfg = TrainConfig(name="tiny", seed=7)
    cfg.precision.dtype = "fp32"
    cfg.precision.transformer_impl = "local"
    cfg.model.vocab_size = 256
    cfg.model.hidden_size = 64
    cfg.model.ffn_hidden_size = 128
    cfg.model.num_attention_heads = 4
    cfg.model.num_query_groups = 2
    cfg.model.max_position_embeddings = 512
    cfg.data.seq_length = 64
    cfg.optim.lr = 3e-3
    cfg.optim.min_lr = 3e-4
    cfg.optim.warmup_steps = 2
    cfg.optim.train_steps = 8
    cfg.optim.global_batch_size = 2
    cfg.checkpoint.save_interval = 4
    cfg.log.tensorboard = False
    return cfg.apply_overrides([f"{k}={v}" for k, v in overrides.items()]).validate()


def packed_sample(lengths: list[int], vocab: int, seed: int = 0, n_sources: int = 2) -> dict[str, torch.Tensor]:
    """One packed sequence in the shard reader's dict shape; the last piece is padding."""
    g = torch.Generator().manual_seed(seed)
    S = sum(lengths)
    tokens = torch.randint(1, vocab, (S + 1,), generator=g)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    loss_mask = torch.ones(S, dtype=torch.float32)
    position_ids = torch.cat([torch.arange(n) for n in lengths])
    source_ids = torch.cat([torch.full((n,), i % n_sources) for i, n in enumerate(lengths)])
    loss_mask[(cu[1:] - 1).long()] = 0.0  # last position of each piece predicts across a boundary
    # treat the final piece as padding
    pad_start = int(cu[-2])
    loss_mask[pad_start:] = 0.0
    source_ids[pad_start:] = -1
    tokens[pad_start:] = 0
    return {
        "tokens": tokens[:S].long(),
        "labels": tokens[1:].long(),
        "loss_mask": loss_mask,
        "cu_seqlens": cu,
        "position_ids": position_ids.long(),
        "source_ids": source_ids.long(),
    }


def write_shards(
    out_dir,
    *,
    sequences: int = 16,
    seq_length: int = 64,
    vocab: int = 256,
    seed: int = 0,
    sources: tuple[str, ...] = ("repo", "trace"),
    valid: int = 2,
    masks: bool = False,
    pad_multiple: int = 1,
    loss_free: bool = False,
):
    """A tiny packed shard dir written with the packed shard writer (midtrain.formats.shards layout + manifest).

    Documents are learnable (each continues an arithmetic progression mod vocab with a per-document step),
    so a few optimizer steps visibly lower the loss. ``loss_free`` (with masks): no position is a loss target.
    """
    import json
    from pathlib import Path

    import numpy as np

    from midtrain.formats.shards import PackedShardWriter, Piece, shard_prefix

    out = Path(out_dir)
    rng = np.random.default_rng(seed)
    splits: dict[str, dict] = {}
    manifest = {
        "seq_length": seq_length,
        "pad_id": 0,
        "pad_multiple": pad_multiple,
        "masks": masks,
        "vocab_size": vocab,
        "sources": {s: {} for s in sources},
        "splits": splits,
    }
    doc = 0
    for split, count in (("train", sequences), ("valid", valid)):
        w = PackedShardWriter(
            shard_prefix(out, split, 0),
            seq_length=seq_length,
            pad_id=0,
            dtype=np.uint16,
            sources=list(sources),
            with_masks=masks,
            pad_multiple=pad_multiple,
        )
        for _ in range(count):
            pieces, room = [], seq_length - int(rng.integers(0, 6))  # some sequences end with padding
            while room >= 4:
                n = int(rng.integers(4, min(room, seq_length // 2) + 1))
                start, step = int(rng.integers(1, vocab)), int(rng.integers(1, 4))
                toks = (start + step * np.arange(n)) % (vocab - 1) + 1
                mask = None
                if masks:  # SFT-like: only the second half of each document is a loss target
                    mask = (np.arange(n) >= (n if loss_free else n // 2)).astype(np.uint8)
                pieces.append(Piece(toks, mask, doc % len(sources), f"doc-{doc}"))
                doc += 1
                room -= -(-n // pad_multiple) * pad_multiple
            w.add(pieces)
        stats = w.finalize()
        splits[split] = {"shards": [f"{split}/00000"], "sequences": stats["sequences"]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


MOE = {
    "model.num_experts": 4,
    "model.moe_ffn_hidden_size": 32,
    "model.moe_router_topk": 2,
    "model.moe_aux_loss_coeff": 0.01,
}


def tiny_moe_config(**overrides: object) -> TrainConfig:
    """tiny_config as a Qwen3-MoE shape: 4 experts of width 32, top-2, load-balancing loss."""
    return tiny_config(**{**MOE, **overrides})


def pipeline_stage_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    """One of two gloo ranks at PP=2: record the seed this stage's RNGs got and the draws of its tracked
    model-parallel RNG (what initialises its layers)."""
    import os

    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    from megatron.core import tensor_parallel

    distributed.initialize(pipeline=2, seed=7)
    with tensor_parallel.get_cuda_rng_tracker().fork():
        draws = torch.rand(4)
    torch.save(
        {"seed": torch.initial_seed(), "draws": draws, "default": torch.rand(4)}, Path(out_dir) / f"stage{rank}.pt"
    )
    distributed.destroy()
