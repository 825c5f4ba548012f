"""Run logging on rank 0: readable console lines, metrics.jsonl (one object per step), TensorBoard, W&B."""

from __future__ import annotations

import json
import logging
import math
import time
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
        self._first: tuple[int, float] | None = None  # (step, time) of the first step this process ran
        if not enabled:
            return
        path = run_dir / "metrics.jsonl"
        if path.exists():
            set_aside_later_steps(path, resume_step)
        self._metrics = path.open("a")
        if cfg.log.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(run_dir / "tb"), purge_step=resume_step + 1 if resume_step else None)
            except Exception as e:  # noqa: BLE001 - logging must not stop training
                log.warning("TensorBoard disabled: %s", e)
        if self._tb is not None:
            log.info(
                "logging to %s (one line per step) and TensorBoard %s (view: tensorboard --logdir %s)",
                path,
                run_dir / "tb",
                run_dir / "tb",
            )
        else:
            log.info("logging to %s (one line per step); TensorBoard off (log.tensorboard=true turns it on)", path)
        if cfg.log.wandb_project:
            try:
                import wandb

                self._wandb = wandb.init(
                    project=cfg.log.wandb_project,
                    name=cfg.name,
                    config=cfg.to_dict(),
                    dir=str(run_dir),
                    resume="allow",
                    id=wandb_run_id(cfg.name, run_dir),
                )
            except Exception as e:  # noqa: BLE001 - W&B is optional
                log.warning("W&B disabled: %s", e)

    def step(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        assert self._metrics is not None  # opened in __init__ when enabled
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
        now = time.monotonic()
        if self._first is None:
            self._first = (step, now)
        if step % self.interval == 0 or step == self.total:
            log.info(self.format(record, eta_s=self.eta(step, now), gpu_memory=_gpu_memory()))

    def eta(self, step: int, now: float) -> float | None:
        """Seconds left at the mean pace since the first step this process ran (which holds start-up costs,
        so it is the reference point, not part of the pace); None until two steps have run."""
        if self._first is None or step <= self._first[0]:
            return None
        per_step = (now - self._first[1]) / (step - self._first[0])
        return per_step * max(self.total - step, 0)

    def format(self, r: dict[str, Any], eta_s: float | None = None, gpu_memory: str | None = None) -> str:
        parts = [
            f"step {r['step']:>{len(str(self.total))}}/{self.total}",
            f"loss {r['loss']:.4f}",
            f"lr {r['lr']:.2e}",
            f"gnorm {r['grad_norm']:.3f}",
            f"{r['tokens_per_s']:,.0f} tok/s",
        ]
        if r.get("tflops_per_device") is not None:
            parts.append(f"{r['tflops_per_device']:.2f} TFLOP/s/dev")
        if r.get("mfu") is not None:
            parts.append(f"MFU {100 * r['mfu']:.1f}%")
        if r.get("moe_load_balancing_loss") is not None:  # MoE router: 1.0 = balanced
            parts.append(f"moe balance {r['moe_load_balancing_loss']:.3f}")
        if r.get("skipped"):
            parts.append("SKIPPED (non-finite)")
        if gpu_memory:
            parts.append(gpu_memory)
        if eta_s is not None:
            parts.append(f"ETA {_duration(eta_s)}")
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


def set_aside_later_steps(path: Path, resume_step: int) -> Path | None:
    """Before a run resumes at ``resume_step``, move the lines of its metrics.jsonl past that step (a run that
    went further than its last checkpoint, or a partial last line) to ``metrics.after_step_<step>[.N].jsonl``
    beside it, so the file continues with the steps about to be trained again and nothing is deleted.
    metrics.jsonl is otherwise only appended to. Returns the side file, or None when nothing was moved."""
    text = path.read_text()
    lines = text.splitlines()
    kept: list[str] = []
    later: list[str] = []
    for line in lines:
        step = _step_of(line)
        if step is not None and step <= resume_step:
            kept.append(line)
        elif line.strip():
            later.append(line)
    if not later and len(kept) == len(lines) and (not text or text.endswith("\n")):
        return None
    side = None
    if later:
        side = path.with_name(f"metrics.after_step_{resume_step:07d}.jsonl")
        n = 0
        while side.exists():
            n += 1
            side = path.with_name(f"metrics.after_step_{resume_step:07d}.{n}.jsonl")
        side.write_text("".join(line + "\n" for line in later))  # first: a kill here loses no line
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    tmp.replace(path)
    if side is not None:
        log.warning(
            "%s: %d line(s) after step %d (steps past the checkpoint this run resumes from) moved to %s",
            path,
            len(later),
            resume_step,
            side,
        )
    return side


def wandb_run_id(name: str, run_dir: Path) -> str:
    """The W&B run id of a run directory: a restart of the same directory resumes its W&B run, while two
    directories trained from the same recipe (same name) get two runs."""
    import hashlib

    digest = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:50]
    return f"{safe}-{digest}"


def _duration(seconds: float) -> str:
    """1:02:03 (or 2d 1:02:03) for a number of seconds."""
    s = int(round(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}d {text}" if days else text


def _gpu_memory() -> str | None:
    """Peak GPU memory of this process against the device's total, on GPUs; None on CPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        peak = torch.cuda.max_memory_allocated() / 2**30
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2**30
        return f"mem {peak:.1f}/{total:.0f} GiB"
    except Exception:  # noqa: BLE001 - a console nicety must never stop training
        return None


def _step_of(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None
