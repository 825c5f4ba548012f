"""A checkpoint loaded for evaluation: logits and per-token NLL of (packed) token sequences.

Two kinds of checkpoint: a midtrain run / checkpoint directory (megatron-core GPTModel built from the run's
config.yaml with the trainer's own model provider, weights via ``load_weights``), and a Hugging Face model
directory (config.json; transformers). Packed input is scored per document: the megatron model takes THD
``cu_seqlens`` (document-masked attention), the HF model runs each piece alone — the same logits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from midtrain.formats.rundir import CONFIG, run_dir_of
from midtrain.train import distributed
from midtrain.train.checkpoint import latest_checkpoint, load_weights
from midtrain.train.config import TrainConfig

log = logging.getLogger(__name__)

_CE_CHUNK = 512  # rows per cross-entropy chunk: keeps the [rows, vocab] temporaries small on CPU


def is_hf_dir(path: str | Path) -> bool:
    return (Path(path) / "config.json").is_file()


def midtrain_run_dir(checkpoint: str | Path) -> Path:
    """The run directory (holding config.yaml) of a run dir or of RUN/checkpoints/iter_*."""

    run = run_dir_of(checkpoint)
    if (run / CONFIG).is_file():
        return run
    raise FileNotFoundError(
        f"{checkpoint}: no config.yaml here or two levels up (not a midtrain run or "
        "checkpoint directory, and no config.json: not a Hugging Face model either)"
    )


class Scorer:
    """``logits(tokens, position_ids, cu_seqlens)`` -> [S, V] float32 for one packed sequence."""

    name: str = ""
    vocab_size: int = 0
    max_positions: int | None = None

    def logits(
        self,
        tokens: torch.Tensor,
        position_ids: torch.Tensor,
        cu_seqlens: torch.Tensor,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[S, V] float32, or [len(positions), V] for only those positions (the output layer dominates a
        small model's cost: the retrieval probe needs a handful of positions, not the whole context)."""
        raise NotImplementedError

    @torch.no_grad()
    def token_nll(
        self,
        tokens: torch.Tensor,
        labels: torch.Tensor,
        position_ids: torch.Tensor,
        cu_seqlens: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """-log p(labels[i] | tokens[:i+1]) per position, [S] float32; with MASK only where it is set (0 elsewhere,
        and the output layer runs on those positions alone: a trajectory's assistant turns are a third of it)."""
        out = torch.zeros(labels.shape[0], dtype=torch.float32)
        where = None if mask is None else torch.nonzero(mask > 0).flatten()
        if where is not None and where.numel() == 0:
            return out
        logits = self.logits(tokens, position_ids, cu_seqlens, where)
        target = labels if where is None else labels[where]
        nll = torch.empty(target.shape[0], dtype=torch.float32)
        for start in range(0, target.shape[0], _CE_CHUNK):
            sl = slice(start, start + _CE_CHUNK)
            nll[sl] = F.cross_entropy(logits[sl].float(), target[sl], reduction="none")
        if where is None:
            return nll
        out[where] = nll
        return out


class MidtrainScorer(Scorer):
    def __init__(self, checkpoint: str | Path) -> None:
        # lazy: loads megatron only when this runs
        from midtrain.train.model import build_gpt_model

        run_dir = midtrain_run_dir(checkpoint)
        ckpt = latest_checkpoint(checkpoint)
        if ckpt is None:
            raise FileNotFoundError(f"{checkpoint}: no complete midtrain checkpoint")
        cfg = TrainConfig.from_yaml(run_dir / "config.yaml")
        # One process scores: no model parallelism (dist_checkpointing reshards a TP/PP checkpoint on load).
        cfg = cfg.in_one_process()
        # Joins the process group already up (the SFT probe's training one: a second one on the same
        # MASTER_PORT would race the first's teardown) and makes its model-parallel groups TP=PP=1.
        distributed.initialize(seed=cfg.seed)
        self.cfg = cfg
        self.model = build_gpt_model(cfg).eval()
        self.checkpoint = load_weights(ckpt, self.model)
        self.name = str(self.checkpoint)
        self.vocab_size = cfg.model.vocab_size
        self.max_positions = cfg.model.max_position_embeddings
        self.device = next(self.model.parameters()).device

    @torch.no_grad()
    def logits(
        self,
        tokens: torch.Tensor,
        position_ids: torch.Tensor,
        cu_seqlens: torch.Tensor,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # lazy: loads megatron only when this runs
        from midtrain.train.batch import to_batch
        from midtrain.train.model import output_rows

        S = tokens.shape[0]
        sample = {
            "tokens": tokens,
            "labels": tokens,
            "loss_mask": torch.ones(S),
            "position_ids": position_ids,
            "source_ids": torch.zeros(S, dtype=torch.long),
            "cu_seqlens": cu_seqlens,
        }
        b = to_batch(sample, self.device)
        rows = positions.to(self.device) if positions is not None else None
        with output_rows(self.model, rows):  # logits only at the wanted positions
            out = self.model(b.tokens, b.position_ids, attention_mask=None, packed_seq_params=b.packed_seq_params)
        return out[0, :, : self.vocab_size].float().cpu()  # [b=1, s, V] -> [s, V]


class HFScorer(Scorer):
    def __init__(self, model_dir: str | Path) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32).eval()
        self.name = str(model_dir)
        self.vocab_size = int(self.model.config.vocab_size)
        self.max_positions = getattr(self.model.config, "max_position_embeddings", None)

    @torch.no_grad()
    def logits(
        self,
        tokens: torch.Tensor,
        position_ids: torch.Tensor,
        cu_seqlens: torch.Tensor,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        bounds = cu_seqlens.tolist()
        parts = []
        for s, e in zip(bounds[:-1], bounds[1:]):  # each document alone == document-masked attention
            if e <= s:
                continue
            keep = 0  # transformers: 0 = every position
            if positions is not None:
                keep = positions[(positions >= s) & (positions < e)] - s
                if keep.numel() == 0:
                    continue
            out = self.model(input_ids=tokens[s:e][None], position_ids=position_ids[s:e][None], logits_to_keep=keep)
            parts.append(out.logits[0].float())
        return torch.cat(parts)


def load_scorer(checkpoint: str | Path) -> Scorer:
    """A midtrain run/checkpoint directory or an HF model directory, ready to score."""
    path = Path(checkpoint)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    scorer = HFScorer(path) if is_hf_dir(path) else MidtrainScorer(path)
    log.info("scoring with %s", scorer.name)
    return scorer


def iter_samples(dataset, max_sequences: int | None) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
    n = len(dataset) if max_sequences is None else min(len(dataset), max_sequences)
    for i in range(n):
        yield i, dataset[i]
