"""Train-from-HF is one recipe field: `init_from` = an HF directory or its hf2mcore conversion, through the
trainer's own loop on real packed shards; the trained run exports back to HF."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hf_helpers import make_hf_model
from train_helpers import tiny_config, write_shards

from midtrain.train import distributed
from midtrain.train.hf_export import export_hf
from midtrain.train.hf_import import convert_hf_to_mcore, load_hf_state_dict, model_config_from_hf
from midtrain.train.trainer import train


def _first_loss(run_dir: Path) -> float:
    return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])["loss"]


@pytest.mark.slow
def test_init_from_hf_dir_and_from_its_conversion_train_the_same(tmp_path):
    src = make_hf_model("qwen3", tmp_path / "hf", seed=5)
    shards = write_shards(tmp_path / "shards", sequences=8, seq_length=64, vocab=256)
    mc = tmp_path / "mc"
    convert_hf_to_mcore(src, mc)

    def run(name: str, init_from: Path | None) -> Path:
        cfg = tiny_config(
            **{
                "data.path": str(shards),
                "run_dir": str(tmp_path / name),
                "optim.train_steps": 1,
                "optim.warmup_steps": 0,
                "optim.lr": 1e-9,
                "optim.min_lr": 1e-9,
            }
        )
        cfg.model = model_config_from_hf(src)
        cfg.init_from = str(init_from) if init_from else None
        assert train(cfg.validate())["exit_code"] == 0
        distributed.destroy()
        return tmp_path / name

    from_hf, from_mc = run("from_hf", src), run("from_mc", mc)
    assert _first_loss(from_hf) == pytest.approx(_first_loss(from_mc), abs=1e-6)
    scratch = run("scratch", None)  # control: without init_from the same seed gives another loss
    assert abs(_first_loss(scratch) - _first_loss(from_hf)) > 1e-3

    # the trained run (lr 1e-9: weights unchanged to ~1e-8) exports back to the HF weights, with the
    # tokenizer found through init_from
    back = export_hf(from_hf, tmp_path / "back")
    a, b = load_hf_state_dict(src), load_hf_state_dict(back)
    assert sorted(a.keys()) == sorted(b.keys())
    assert max((a[k] - b[k]).abs().max().item() for k in a.keys()) < 1e-6
    assert (back / "tokenizer.json").is_file()
    assert export_hf(from_hf, tmp_path / "back") == tmp_path / "back"  # a rerun replaces the export
    # a run trained from scratch has no HF source: a Qwen3 model gets the offline default tokenizer
    scratch_hf = export_hf(scratch, tmp_path / "scratch_hf")
    tc = json.loads((scratch_hf / "tokenizer_config.json").read_text())
    assert (tc["eos_token"], tc["pad_token"]) == ("<|im_end|>", "<|endoftext|>")  # served as a chat model
