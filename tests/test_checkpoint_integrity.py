"""What a checkpoint promises its readers: every file as written (export, init_from and resume check the
SHA-256s complete.json records, one implementation), and the model it was written for."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from train_helpers import (
    destroy_process_groups,  # noqa: F401 (autouse fixture)
    tiny_config,
    write_shards,
)

from midtrain.train import distributed
from midtrain.train.checkpoint import CheckpointError, verify_checkpoint
from midtrain.train.trainer import train


def _in_process(cfg, run_dir: Path, *overrides: str) -> dict:
    result = train(cfg.apply_overrides([f"run_dir={run_dir}", *overrides]))
    distributed.destroy()
    return result


@pytest.fixture(scope="module")
def run4(tmp_path_factory):
    """4 steps of the tiny model (a checkpoint at step 4): a run directory to damage or start from."""
    tmp = tmp_path_factory.mktemp("run4")
    shards = write_shards(tmp / "shards", sequences=24, seq_length=64)
    cfg = tiny_config(**{"data.path": str(shards), "optim.train_steps": 4})
    _in_process(cfg, tmp / "run")
    return cfg, tmp / "run"


def _flip_64_bytes(ckpt: Path) -> Path:
    """64 bytes of the largest tensor file inverted, its size unchanged (what a failing disk or a bad copy does)."""
    victim = max(ckpt.glob("*.distcp"), key=lambda f: f.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[512:576] = bytes(b ^ 0xFF for b in data[512:576])
    victim.write_bytes(bytes(data))
    return victim


def test_export_and_init_from_refuse_a_checkpoint_with_flipped_bytes_naming_the_file(run4, tmp_path, capsys):
    from midtrain.cli import main

    cfg, src = run4
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    ckpt = run_dir / "checkpoints" / "iter_0000004"
    assert verify_checkpoint(run_dir) == ckpt == verify_checkpoint(ckpt)
    victim = _flip_64_bytes(ckpt)
    for where in (run_dir, ckpt):
        with pytest.raises(CheckpointError, match=f"{victim}.*SHA-256"):
            verify_checkpoint(where)
    assert main(["convert", "mcore2hf", str(run_dir), str(tmp_path / "hf")]) == 1
    err = capsys.readouterr().err
    assert str(victim) in err and "SHA-256" in err and "Traceback" not in err
    assert not (tmp_path / "hf").exists()  # nothing exported
    with pytest.raises(CheckpointError, match=f"{victim}.*SHA-256"):
        _in_process(cfg, tmp_path / "fresh", f"init_from={run_dir}")
    assert not list((tmp_path / "fresh" / "checkpoints").glob("iter_*"))
