"""TP=2 and DP=2 over gloo (two CPU processes under torchrun) give the single-process losses."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import metrics, tiny_config, write_shards

from midtrain.train import distributed
from midtrain.train.trainer import train

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(cfg_path: Path, run_dir: Path, nproc: int, *overrides: str) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    args = ["-m", "midtrain.cli", "train", str(cfg_path), f"run_dir={run_dir}", *overrides]
    cmd = [str(TORCHRUN), "--nproc-per-node", str(nproc), "--master-port", str(_free_port()), *args]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return metrics(run_dir)


@pytest.mark.slow
def test_tp2_and_dp2_match_single_process(tmp_path):
    shards = write_shards(tmp_path / "shards", sequences=24, seq_length=64)
    cfg = tiny_config(
        **{
            "data.path": str(shards),
            "optim.train_steps": 4,
            "optim.global_batch_size": 4,
            "checkpoint.save_interval": 100,
            "checkpoint.save_final": False,
        }
    )
    cfg_path = tmp_path / "cfg.yaml"
    cfg.save_yaml(cfg_path)
    # Reference in this process (saves a Python start-up); the parallel runs under torchrun.
    train(cfg.apply_overrides([f"run_dir={tmp_path / 'single'}"]))
    distributed.destroy()
    single = metrics(tmp_path / "single")
    tp = _train(cfg_path, tmp_path / "tp2", 2, "parallel.tensor=2")
    assert (tmp_path / "tp2" / "config.yaml").read_text().count("tensor: 2") == 1
    dp = _train(cfg_path, tmp_path / "dp2", 2, "parallel.data=2")
    assert len(single) == len(tp) == len(dp) == 4
    assert single[-1]["loss"] < single[0]["loss"]
    for a, b, c in zip(single, tp, dp):
        for key in ("loss", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-7), ("TP=2", key, a["step"])
            assert c[key] == pytest.approx(a[key], rel=1e-6, abs=1e-7), ("DP=2", key, a["step"])
        assert c["loss_by_source"] == pytest.approx(a["loss_by_source"], rel=1e-6)
        # model FLOPs of the step: the two DP ranks' documents add up to the single process's batch
        assert b["flops"] == pytest.approx(a["flops"], rel=1e-12) and c["flops"] == pytest.approx(a["flops"], rel=1e-12)


@pytest.mark.slow
def test_pp2_trains_over_gloo(tmp_path):
    """PP=2: megatron's pipelined schedule over gloo p2p; loss comes back from the last stage to rank 0's log.

    Each stage draws its layers' initial weights from its own RNG stream, so the losses match a
    single-process run only closely, not exactly.
    """
    shards = write_shards(tmp_path / "shards", sequences=24, seq_length=64)
    cfg = tiny_config(
        **{
            "data.path": str(shards),
            "optim.train_steps": 4,
            "optim.global_batch_size": 4,
            "checkpoint.save_interval": 2,
            "checkpoint.save_final": False,
        }
    )
    cfg_path = tmp_path / "cfg.yaml"
    cfg.save_yaml(cfg_path)
    pp = _train(cfg_path, tmp_path / "pp2", 2, "parallel.pipeline=2")
    assert [r["step"] for r in pp] == [1, 2, 3, 4]
    assert pp[-1]["loss"] < pp[0]["loss"] and pp[0]["loss"] == pytest.approx(5.55, abs=0.1)  # ~ln(256)
    assert set(pp[0]["loss_by_source"]) == {"repo", "trace"}
    assert (tmp_path / "pp2" / "checkpoints" / "iter_0000004" / "complete.json").is_file()


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_context_parallel_matches_cp1(tmp_path):
    """CP=2 (TE THD attention, load-balanced split of every document) gives the CP=1 losses on 2 GPUs."""
    import torch

    from midtrain.train.model import te_available

    if torch.cuda.device_count() < 2 or not te_available():
        pytest.skip("needs 2 GPUs and Transformer Engine")
    shards = write_shards(tmp_path / "shards", sequences=16, seq_length=256, pad_multiple=4)  # 2*CP
    cfg = tiny_config(
        **{
            "data.path": str(shards),
            "data.seq_length": 256,
            "optim.train_steps": 4,
            "optim.global_batch_size": 2,
            "precision.dtype": "bf16",
            "precision.transformer_impl": "transformer_engine",
            "checkpoint.save_final": False,
        }
    )
    cfg_path = tmp_path / "cfg.yaml"
    cfg.save_yaml(cfg_path)
    cp1 = _train(cfg_path, tmp_path / "cp1", 2, "parallel.data=2")
    cp2 = _train(cfg_path, tmp_path / "cp2", 2, "parallel.context=2", "optim.global_batch_size=2")
    for a, b in zip(cp1[:2], cp2[:2]):  # early steps: bf16 kernels differ in summation order only
        assert b["loss"] == pytest.approx(a["loss"], rel=2e-2)


@pytest.mark.slow
def test_pipeline_stages_are_seeded_apart(tmp_path):
    """megatron seeds each pipeline stage with seed + 100 x its pipeline rank, so the stages' layers do not
    start from the same random draws; before, every stage got the same seed."""
    import torch
    import torch.multiprocessing as mp
    from train_helpers import pipeline_stage_worker

    mp.spawn(pipeline_stage_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    first, second = torch.load(tmp_path / "stage0.pt"), torch.load(tmp_path / "stage1.pt")
    assert (first["seed"], second["seed"]) == (7, 107)
    assert not torch.equal(first["draws"], second["draws"]) and not torch.equal(first["default"], second["default"])
