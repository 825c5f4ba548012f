"""The fixed SFT probe: the same short SFT run from any checkpoint, then its held-out assistant-token loss.

``run_probe(cfg, start, output)``: build (or reuse) the probe's data (midtrain.sft.data), train with the
trainer's own ``train(cfg)`` from ``start`` (``init_from``: weights only, fresh optimizer, step 0), score the
held-out traces with the trained weights (loss on assistant tokens only: the reader's loss_mask carries the
spans), export an HF checkpoint (train.hf_export) when cfg.export_hf is set, and write OUTPUT/sft_result.json.

The model shape comes from the start checkpoint's own config.yaml (a midtrain run), so one probe recipe
serves every checkpoint of a family; everything else (data, steps, LR schedule, batch, seed) is the recipe's.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from midtrain.formats.outputs import REDO, REUSE, claim
from midtrain.formats.rundir import SFT_RESULT, read_metrics
from midtrain.formats.stamp import content_id, read_stamp
from midtrain.formats.tokenizer import load_tokenizer
from midtrain.sft.config import SFTConfig
from midtrain.sft.run_stamp import WORK, older_record, probe_stamp, start_identity
from midtrain.train.config import TrainConfig
from midtrain.train.run_stamp import reuse_or_clear

log = logging.getLogger(__name__)


def _start_model(cfg: SFTConfig, start: Path) -> SFTConfig:
    """Take the model section from a midtrain start checkpoint's config (shapes must match to load)."""
    # lazy: loads torch only when this runs
    from midtrain.eval.scoring import is_hf_dir, midtrain_run_dir

    if is_hf_dir(start):
        return cfg
    src = TrainConfig.from_yaml(midtrain_run_dir(start) / "config.yaml")
    if src.model != cfg.train.model:
        log.info("SFT probe: model shape taken from %s (the recipe's differs)", start)
        cfg.train.model = src.model
    return cfg


def export_hf(run_dir: Path, out: Path, tokenizer: str | None) -> str:
    """mcore -> HF with train.hf_export (what vLLM serves for SWE-bench)."""
    # lazy: loads torch only when this runs
    from midtrain.train.hf_export import export_hf as export

    return str(export(run_dir, out, tokenizer=tokenizer))


# what makes a process one rank of a larger world (midtrain.train.distributed.read_env reads these; under
# torchrun, TORCHELASTIC_USE_AGENT_STORE makes init_process_group a client of the launcher's store)
_RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
# the child logs as the CLI does, so the job log shows the export's progress, once
_EXPORT = (
    "import logging, sys; from midtrain.train.hf_export import export_hf; "
    "logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s %(name)s: %(message)s', "
    "datefmt='%H:%M:%S'); export_hf(sys.argv[1], sys.argv[2], sys.argv[3] or None)"
)


def export_once(run_dir: Path, out: Path, tokenizer: str | None) -> str:
    """export_hf once per job: in a multi-rank probe, rank 0 writes it while the others wait; every rank
    raises if it failed. The conversion runs in a world of one, so rank 0 runs it in a child process that
    is not a rank (this process's group spans every rank, and the conversion's checkpoint load would wait
    for the others in it)."""
    import os
    import subprocess
    import sys

    import torch.distributed as dist

    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return export_hf(run_dir, out, tokenizer)
    error = [""]
    if dist.get_rank() == 0:
        env = {k: v for k, v in os.environ.items() if k not in _RANK_ENV and not k.startswith("TORCHELASTIC_")}
        proc = subprocess.run([sys.executable, "-c", _EXPORT, str(run_dir), str(out), tokenizer or ""], env=env)
        error[0] = f"HF export of {run_dir} into {out} failed (exit {proc.returncode})" if proc.returncode else ""
    dist.broadcast_object_list(error, src=0)  # the others wait here, however long the export takes
    if error[0]:
        raise RuntimeError(error[0])
    return str(out)


def run_probe(
    cfg: SFTConfig, start: str | Path, output: str | Path, recipe: str = "", overwrite: bool = False
) -> dict[str, Any]:
    """Run the probe from START into OUTPUT; returns sft_result.json's content (exit_code 75 = requeue).

    OUTPUT is claimed (formats.outputs, policy ``sft``) by the first rank, the others following its decision:
    reused (result) or resumed (training) only for the same start checkpoint (path and content) and the same
    settings; another start or other settings are refused naming them, or with ``overwrite`` rerun afresh; a
    second probe into it is refused, naming the first.
    """
    start, out = Path(start), Path(output)
    if not start.exists():  # before the imports below (megatron: seconds), so a wrong path fails at once
        raise FileNotFoundError(f"--from {start}: no such checkpoint")
    # lazy: loads torch only when this runs
    from midtrain.train.distributed import read_env

    cfg, fields = _probe_fields(cfg, start)
    hold = read_env().rank == 0
    with claim(out, "sft", probe_stamp(fields), overwrite, hold=hold, before=older_record(out)) as c:
        old = read_stamp(out / SFT_RESULT) if c.action == REUSE else None
        if old is not None and old.get("exit_code") == 0:
            log.info("SFT probe: %s is complete for these settings; skipped", out / SFT_RESULT)
            return old
        if c.action == REDO and c.holds:  # another probe's work (--overwrite): started afresh
            for w in WORK:
                shutil.rmtree(out / w) if (out / w).is_dir() else (out / w).unlink(missing_ok=True)
        result = _run_probe(cfg, start, out, recipe, overwrite, fields, c.want)
        if result["exit_code"] == 0:
            c.complete()
        return result


def _probe_fields(cfg: SFTConfig, start: Path) -> tuple[SFTConfig, dict[str, Any]]:
    """CFG with the start's model, and what the probe is of (run_stamp.probe_stamp's fields): the start's
    identity, the settings' hash and the data identity, which includes the trace sets' recorded held-out split
    (decided now when a set has none) and the content of the traces and tokenizer (sft.data.data_key's)."""
    # lazy: loads datatrove only when this runs
    from midtrain.sft.data import data_key, input_content, trace_splits

    cfg = _start_model(cfg, start)
    cfg.validate()
    content = input_content(cfg)
    fields = {
        **start_identity(start),
        "probe_sha": cfg.probe_hash(),
        "data_sha": data_key(cfg, trace_splits(cfg), content),
        **content,
    }
    return cfg, fields


def _run_probe(
    cfg: SFTConfig, start: Path, out: Path, recipe: str, overwrite: bool, fields: dict[str, Any], want: dict[str, Any]
) -> dict[str, Any]:
    import torch.distributed

    # lazy: loads datatrove, megatron, torch only when this runs
    from midtrain.sft.data import prepare_data
    from midtrain.train import distributed
    from midtrain.train.trainer import train

    data_dir = Path(cfg.data_dir) if cfg.data_dir else out / "data"
    t0 = time.time()
    data = prepare_data(cfg, data_dir, overwrite=overwrite)
    run_dir = out / "run"
    tcfg = cfg.train.replace(init_from=start, run_dir=run_dir, data={"path": data["train_shards"]}).validate()
    if reuse_or_clear(run_dir, tcfg, "SFT probe"):  # another training there is started over, never resumed
        log.info("SFT probe: %s already finished; not retrained", run_dir)
        summary = {"exit_code": 0, "step": tcfg.optim.train_steps}
    else:
        # the process group stays up for the scoring and the export below: destroying it and initialising a
        # new one on the same MASTER_PORT without a barrier left ranks connecting to a store that had gone
        summary = train(tcfg)
    result: dict[str, Any] = {
        "recipe": recipe or cfg.name,
        **fields,  # flat, as the result's readers take them (report, results); the stamp below is what compares
        **want,
        "run_dir": str(run_dir),
        "data_dir": str(data_dir),
        "train_docs": data["train_docs"],
        "valid_docs": data["valid_docs"],
        "steps": tcfg.optim.train_steps,
        "exit_code": summary["exit_code"],
    }
    if summary["exit_code"] != 0:
        log.warning("SFT probe stopped at step %s (exit %s): rerun to resume", summary["step"], summary["exit_code"])
        distributed.destroy()
        return result
    metrics = read_metrics(run_dir)
    tail = [m["loss"] for m in metrics[-final_loss_steps(len(metrics)) :] if isinstance(m.get("loss"), (int, float))]
    result["final_train_loss"] = sum(tail) / len(tail) if tail else None  # one step is one batch: too noisy
    result["final_train_loss_steps"] = len(tail)
    result["trained_tokens"] = sum(int(m.get("trained_tokens", 0) or 0) for m in metrics) or None
    if data["valid_shards"]:
        result.update(_score_heldout(cfg, run_dir, data))
    else:
        log.warning(
            "SFT probe: no held-out traces (the recorded split of %s holds none of the usable traces)",
            ", ".join(cfg.traces),
        )
    result["heldout"] = heldout_check(data, start, result.get("heldout_tokens"), cfg.tokenizer)
    result["hf_dir"] = export_once(run_dir, out / "hf", cfg.tokenizer) if cfg.export_hf else None
    # what SWE-bench grades must be this export: the report checks its stamp against this id
    result["hf_id"] = content_id(result["hf_dir"]) if result["hf_dir"] else None
    result["seconds"] = round(time.time() - t0, 1)
    multi = torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
    if not multi or torch.distributed.get_rank() == 0:  # one writer, after the export is complete
        out.mkdir(parents=True, exist_ok=True)
        (out / SFT_RESULT).write_text(json.dumps(result, indent=2))
    if multi:
        torch.distributed.barrier()  # no rank ends the step (srun --wait) before the result is written
    distributed.destroy()  # once, on every rank: leave no process group behind (tests run several probes)
    log.info(
        "SFT probe from %s: final train loss %s, held-out assistant loss %s -> %s",
        start,
        _fmt(result.get("final_train_loss")),
        _fmt(result.get("heldout_loss")),
        out / SFT_RESULT,
    )
    return result


def _score_heldout(cfg: SFTConfig, run_dir: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The trained probe on its held-out traces: assistant-token loss (all, and per trajectory: what the
    primary comparison's bootstrap resamples) and, with command_turns, the commands' teacher-forced accuracy."""
    # lazy: loads torch only when this runs
    from midtrain.eval.heldout import heldout_loss
    from midtrain.eval.scoring import MidtrainScorer

    scorer = MidtrainScorer(run_dir)
    held = heldout_loss(scorer, data["valid_shards"], "train")
    out: dict[str, Any] = {
        "heldout_loss": held["all"]["loss"],
        "heldout_tokens": held["all"]["tokens"],
        "heldout_per_document": {d: v["loss"] for d, v in held["per_document"].items()},
    }
    if cfg.command_turns:
        out["command_accuracy"] = _command_accuracy(cfg, scorer, Path(data["valid_shards"]).parent)
    return out


def _command_accuracy(cfg: SFTConfig, scorer: Any, data_dir: Path) -> dict[str, Any]:
    """Teacher-forced accuracy on the held-out trajectories' commands (DATA_DIR/valid_docs)."""
    # lazy: loads datatrove, torch only when this runs
    from midtrain.eval.command_accuracy import command_accuracy
    from midtrain.formats.trace_split import iter_documents

    tok = load_tokenizer(cfg.tokenizer, shared=True)
    docs = iter_documents(data_dir / "valid_docs")
    return command_accuracy(scorer, tok, docs, cfg.train.data.seq_length, cfg.command_turns)


def final_loss_steps(n: int) -> int:
    """How many last steps final_train_loss averages: a quarter of the run, 1 to 20 steps."""
    return max(1, min(20, n // 4))


def heldout_check(
    data: dict[str, Any], start: Path, tokens: int | None, tokenizer: str | None = None
) -> dict[str, Any]:
    """The held-out set (instances, documents, scored tokens) and how many of its task instances the training
    shards hold (any document of one, in any spelling or trace set): the probe's own and, for a midtrain start,
    the shards its run trained on (0 is the claim; counted); and by content, how many of the held-out traces'
    n-grams those shards hold (:mod:`midtrain.curate.leak_scan`: a trajectory quoted in a commit diff)."""
    # lazy: loads datatrove, torch only when this runs
    from midtrain.curate.leak_scan import describe, scan_against_probe_data
    from midtrain.eval.scoring import is_hf_dir, midtrain_run_dir
    from midtrain.formats.run_split import read as read_run_split
    from midtrain.formats.run_split import training_leaks
    from midtrain.formats.trace_split import instance_of, shard_instances

    shards, excluded = [data["train_shards"]], {}
    if not is_hf_dir(start):
        mid = TrainConfig.from_yaml(midtrain_run_dir(start) / "config.yaml").data.path
        if (Path(mid) / "manifest.json").is_file():
            shards.append(str(mid))
            manifest = json.loads((Path(mid) / "manifest.json").read_text())
            ex = manifest.get("heldout_excluded") or {}
            excluded[str(mid)] = {
                "instances": ex.get("instances"),
                "documents": ex.get("documents"),
                "fraction": ex.get("fraction"),
                "split_sha": (manifest.get("split") or {}).get("sha"),  # the run split the pack applied
            }
        else:
            log.warning("SFT probe: %s trained on %s, which is not here to check for held-out traces", start, mid)
    run_file = (data.get("heldout") or {}).get("run_split")
    if run_file:  # by canonical id under the run's split: every held-out instance, its links and fix commits
        run = read_run_split(run_file)
        found = {s: len(training_leaks(run, s)) for s in shards}
    else:
        held = set((data.get("heldout") or {}).get("instance_ids") or {instance_of(i) for i in data["valid_ids"]})
        found = {s: len(set(shard_instances(s)) & held) for s in shards}
    if any(found.values()):
        log.error("SFT probe: held-out instances in training shards: %s", found)
    content = scan_against_probe_data(Path(data["train_shards"]).parent, shards, tokenizer)
    for scan in content:
        (log.error if scan["leak"] else log.info)("SFT probe: held-out content scan: %s", describe(scan))
    return {
        **(data.get("heldout") or {}),
        "tokens": tokens,
        "checked_training_shards": shards,
        "in_training_shards": sum(found.values()),
        "counted": "instances",
        "excluded_from_pack": excluded,
        "content_scan": content,
        "content_leak": any(s["leak"] for s in content),
    }


def _fmt(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, (int, float)) else "—"
