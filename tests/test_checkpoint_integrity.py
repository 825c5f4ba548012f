"""What a checkpoint promises its readers: every file as written (export, init_from and resume check the
SHA-256s complete.json records, one implementation), and the model it was written for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from train_helpers import (
    destroy_process_groups,  # noqa: F401 (autouse fixture)
    metrics,
    tiny_config,
    train_in_process,
    write_shards,
)

from midtrain.config import ConfigError
from midtrain.train import distributed
from midtrain.train.checkpoint import CheckpointError, verify_checkpoint


@pytest.fixture(scope="module")
def run4(tmp_path_factory):
    """4 steps of the tiny model (a checkpoint at step 4): a run directory to damage or start from."""
    tmp = tmp_path_factory.mktemp("run4")
    shards = write_shards(tmp / "shards", sequences=24, seq_length=64)
    cfg = tiny_config(**{"data.path": str(shards), "optim.train_steps": 4})
    train_in_process(cfg, tmp / "run")
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
        train_in_process(cfg, tmp_path / "fresh", f"init_from={run_dir}")
    assert not list((tmp_path / "fresh" / "checkpoints").glob("iter_*"))


def test_a_resume_onto_another_model_is_refused_from_the_checkpoint_without_config_yaml(run4, tmp_path):
    """The checkpoint records the model's shape: with config.yaml gone a resume without q/k layernorm (which would
    have dropped the trained norms) is refused naming the field, before anything is written."""
    cfg, src = run4
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    (run_dir / "config.yaml").unlink()
    with pytest.raises(
        ConfigError,
        match=r"model.qk_layernorm: .*iter_0000004 holds a run with another value "
        r"\(config.model.qk_layernorm: recorded True, now False\)",
    ):
        train_in_process(cfg, run_dir, "model.qk_layernorm=false")
    assert not (run_dir / "config.yaml").exists()
    with pytest.raises(ConfigError, match=r"model.hidden_size: 64 -> 128.*init_from needs the same model shape"):
        train_in_process(
            cfg, tmp_path / "other", f"init_from={run_dir}", "model.hidden_size=128", "model.ffn_hidden_size=256"
        )


def test_init_from_refuses_tensors_the_model_has_no_place_for_unless_told_to_drop_them(run4, tmp_path):
    """A checkpoint that records no shape (as older ones, or a hand-made one) with q/k layernorm, into a model
    without: the load names the tensors it would drop; init_from_drop_unused=true drops them and trains."""
    from midtrain.train.checkpoint import save_checkpoint
    from midtrain.train.model import build_gpt_model

    cfg, _ = run4
    distributed.initialize(seed=cfg.seed)
    save_checkpoint(tmp_path / "bare", 0, build_gpt_model(cfg), None, {"step": 0, "initial": True}, 1)
    distributed.destroy()
    without = ["model.qk_layernorm=false", f"init_from={tmp_path / 'bare'}", "optim.train_steps=2"]
    with pytest.raises(CheckpointError, match=r"holds .*q_layernorm.* that this model has no place for"):
        train_in_process(cfg, tmp_path / "strict", *without)
    assert train_in_process(cfg, tmp_path / "dropped", *without, "init_from_drop_unused=true")["step"] == 2


def test_fp32_with_the_distributed_optimizer_resumes_exactly(run4, tmp_path):
    """megatron's distributed optimizer keeps the fp32 model's own parameters as its master copies: the load
    writes into them under no_grad (before, every such checkpoint failed to load: 'a view of a leaf Variable')."""
    cfg, _ = run4
    opt = ["parallel.distributed_optimizer=true", "checkpoint.save_interval=2"]
    train_in_process(cfg, tmp_path / "whole", *opt)
    run_dir = tmp_path / "resumed"
    shutil.copytree(tmp_path / "whole", run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "iter_0000004")
    assert train_in_process(cfg, run_dir, *opt)["step"] == 4
    assert [r["loss"] for r in metrics(run_dir)] == [r["loss"] for r in metrics(tmp_path / "whole")]
    assert (run_dir / "metrics.after_step_0000002.jsonl").is_file()  # it did resume at step 2


def _with_tokenizer(shards: Path, dst: Path, name: str, vocab: int) -> Path:
    """A copy of the shards whose manifest says they were packed with tokenizer NAME (its content hash)."""
    shutil.copytree(shards, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["tokenizer"] = {"file": f"/tok/{name}/tokenizer.json", "hash": f"{name}0000", "vocab_size": vocab}
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_shards_of_another_tokenizer_are_refused_after_init_from_and_on_resume(run4, tmp_path):
    cfg, _ = run4
    first = _with_tokenizer(Path(cfg.data.path), tmp_path / "shards_a", "aaaa", 200)
    other = _with_tokenizer(Path(cfg.data.path), tmp_path / "shards_b", "bbbb", 256)
    run_dir = tmp_path / "run"
    train_in_process(cfg, run_dir, f"data.path={first}", "optim.train_steps=2")
    both = (
        r"tokenized with /tok/aaaa/tokenizer.json \(hash aaaa0000, 200 tokens\), these shards with "
        r"/tok/bbbb/tokenizer.json \(hash bbbb0000, 256 tokens\)"
    )
    with pytest.raises(ConfigError, match="data.path: the checkpoint was trained on shards " + both):
        train_in_process(cfg, tmp_path / "next", f"init_from={run_dir}", f"data.path={other}", "optim.train_steps=2")
    with pytest.raises(ConfigError, match=both):
        train_in_process(cfg, run_dir, f"data.path={other}", "optim.train_steps=2")
    assert (
        train_in_process(cfg, tmp_path / "same", f"init_from={run_dir}", f"data.path={first}", "optim.train_steps=2")[
            "step"
        ]
        == 2
    )
