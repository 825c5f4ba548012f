"""Base-model proxy metrics for one checkpoint: held-out loss per source + the code retrieval probe."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from midtrain.eval.config import ProxyConfig
from midtrain.eval.heldout import heldout_loss
from midtrain.eval.results import scored_result
from midtrain.eval.scoring import MidtrainScorer, is_hf_dir, load_scorer
from midtrain.formats.rundir import PROXY_RESULT
from midtrain.formats.stamp import stamp
from midtrain.formats.tokenizer import load_tokenizer
from midtrain.train import distributed
from midtrain.train.distributed import read_env

log = logging.getLogger(__name__)


def run_proxy(checkpoint: str | Path, cfg: ProxyConfig, output: str | Path) -> dict[str, Any]:
    """Score CHECKPOINT; writes OUTPUT/proxy_results.json and returns it. Skips what the config leaves out."""
    cfg.validate()
    want, hold = proxy_stamp(checkpoint, cfg), read_env().rank == 0
    return scored_result("proxy", Path(output) / PROXY_RESULT, want, lambda: _score(checkpoint, cfg), hold)


def proxy_stamp(checkpoint: str | Path, cfg: ProxyConfig) -> dict[str, Any]:
    """What a proxy result is of: the checkpoint's content, the shards' (their manifest) and the retrieval
    repositories' documents (every byte: prepared again in place, they are other haystacks), and the settings."""
    manifest = Path(cfg.shards) / "manifest.json" if cfg.shards else None
    return stamp(
        checkpoint,
        cfg.to_dict(),
        shards=manifest if manifest and manifest.is_file() else None,
        repos=Path(cfg.retrieval.repos) if cfg.retrieval.repos else None,
    )


def _score(checkpoint: str | Path, cfg: ProxyConfig) -> dict[str, Any]:
    scorer = load_scorer(checkpoint)
    result: dict[str, Any] = {"scored": scorer.name}
    if cfg.shards:
        result["heldout"] = _heldout(scorer, cfg.shards, cfg)
    if cfg.retrieval.repos:
        # lazy: loads datatrove only when this runs
        from midtrain.eval.retrieval import retrieval_probe

        tok_path = cfg.tokenizer or (checkpoint if is_hf_dir(checkpoint) else None)
        result["retrieval"] = retrieval_probe(scorer, cfg.retrieval, load_tokenizer(tok_path, shared=True))
    if isinstance(scorer, MidtrainScorer):  # leave no process group behind for the next step in this process
        distributed.destroy()
    _log_summary(result)
    return result


def _heldout(scorer, shards: str, cfg: ProxyConfig) -> dict[str, Any]:

    return heldout_loss(scorer, shards, "valid", cfg.max_sequences)


def _log_summary(r: dict[str, Any]) -> None:
    if "heldout" in r:
        per = ", ".join(f"{k}={v['loss']:.3f}" for k, v in r["heldout"]["per_source"].items())
        log.info("held-out loss: %s (%d sequences)", per or "no tokens", r["heldout"]["sequences"])
    if "retrieval" in r and r["retrieval"]["accuracy"] is not None:
        log.info(
            "retrieval: accuracy %.1f%%, answer NLL %.3f over %d cells",
            100 * r["retrieval"]["accuracy"],
            r["retrieval"]["answer_nll"],
            len(r["retrieval"]["cells"]),
        )
