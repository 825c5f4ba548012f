"""Run logging on rank 0: readable console lines, metrics.jsonl (one object per step), TensorBoard, W&B."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

log = logging.getLogger("midtrain.train")


class RunLogger:
    def __init__(self, run_dir: Path, cfg: Any, enabled: bool, resume_step: int = 0) -> None:
        self.enabled = enabled
        self.interval = cfg.log.interval
        self.total = cfg.optim.train_steps
        self._tb = None
        self._wandb = None
        self._metrics = None
        if not enabled:
            return
        path = run_dir / "metrics.jsonl"
        if path.exists():
            # A resumed run rewrites the steps after its checkpoint: keep only the lines before it.
            kept = [line for line in path.read_text().splitlines() if _step_of(line) is not None
                    and _step_of(line) <= resume_step]
            path.write_text("".join(line + "\n" for line in kept))
        self._metrics = path.open("a")
        if cfg.log.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(run_dir / "tb"), purge_step=resume_step + 1 if resume_step else None)
            except Exception as e:  # noqa: BLE001 - logging must not stop training
                log.warning("TensorBoard disabled: %s", e)
        if cfg.log.wandb_project:
            try:
                import wandb

                self._wandb = wandb.init(project=cfg.log.wandb_project, name=cfg.name, config=cfg.to_dict(),
                                         dir=str(run_dir), resume="allow", id=cfg.name)
            except Exception as e:  # noqa: BLE001 - W&B is optional
                log.warning("W&B disabled: %s", e)

    def step(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._metrics.write(json.dumps(record) + "\n")
        self._metrics.flush()
        step = record["step"]
        scalars = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}
        for name, value in (record.get("loss_by_source") or {}).items():
            scalars[f"loss_by_source/{name}"] = value
        if self._tb is not None:
            for k, v in scalars.items():
                if v is not None and math.isfinite(v):
                    self._tb.add_scalar(k if "/" in k else f"train/{k}", v, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)
        if step % self.interval == 0 or step == self.total:
            log.info(self.format(record))

    def format(self, r: dict[str, Any]) -> str:
        parts = [f"step {r['step']:>{len(str(self.total))}}/{self.total}", f"loss {r['loss']:.4f}",
                 f"lr {r['lr']:.2e}", f"gnorm {r['grad_norm']:.3f}", f"{r['tokens_per_s']:,.0f} tok/s"]
        if r.get("tflops_per_device") is not None:
            parts.append(f"{r['tflops_per_device']:.2f} TFLOP/s/dev")
        if r.get("mfu") is not None:
            parts.append(f"MFU {100 * r['mfu']:.1f}%")
        if r.get("moe_load_balancing_loss") is not None:  # MoE router: 1.0 = balanced
            parts.append(f"moe balance {r['moe_load_balancing_loss']:.3f}")
        if r.get("skipped"):
            parts.append("SKIPPED (non-finite)")
        src = r.get("loss_by_source") or {}
        if src:
            parts.append(" ".join(f"{k}={v:.3f}" for k, v in src.items()))
        return " | ".join(parts)

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _step_of(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None
