"""`midtrain train`: recipe or YAML, overrides, --help, demo_tiny recipe, distributed environment parsing."""

from __future__ import annotations

import pytest

from midtrain.cli import main
from midtrain.config import ConfigError
from midtrain.train.config import TrainConfig
from midtrain.train.distributed import read_env
from recipes import load_train_config as load_config


def test_help_teaches_with_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "midtrain train demo_tiny optim.train_steps=" in out and "exit" in out and "75" in out


def test_demo_tiny_is_a_tiny_qwen3(capsys):
    assert main(["train", "demo_tiny", "optim.lr=1e-3", "--print-config"]) == 0
    cfg = TrainConfig.from_yaml(capsys.readouterr().out)
    assert cfg.optim.lr == 1e-3 and cfg.name == "demo_tiny"
    m = cfg.model
    assert (m.family, m.qk_layernorm, m.tie_embeddings, m.vocab_size) == ("qwen3", True, True, 151936)
    assert m.num_attention_heads // m.num_query_groups == 2  # GQA
    assert cfg.data.seq_length == 2048 and cfg.precision.dtype == "fp32"


def test_only_demo_recipes_build_demo_data():
    from midtrain.demo.shards import is_demo_recipe

    assert is_demo_recipe("demo_tiny") and is_demo_recipe("demo_tiny_moe")
    assert not is_demo_recipe("qwen3_8b_256k_h200") and not is_demo_recipe("no_such_recipe")


def test_yaml_replay_and_overrides(tmp_path):
    cfg = load_config("demo_tiny", ["optim.train_steps=7", "run_dir=somewhere"])
    path = tmp_path / "config.yaml"
    cfg.save_yaml(path)
    again = load_config(str(path), ["optim.lr=2e-3"])
    assert again.optim.train_steps == 7 and again.run_dir == "somewhere" and again.optim.lr == 2e-3


def test_bad_inputs_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "missing.yaml"), [])
    with pytest.raises(ConfigError, match="did you mean 'optim.lr'|optim.*lr"):
        load_config("demo_tiny", ["optim.lrr=1"])
    assert main(["train", "demo_tiny", "parallel.tensor=3", "--print-config"]) == 2  # config error exit code


def test_distributed_env_torchrun_then_slurm():
    assert read_env({}).world_size == 1
    tr = read_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"})
    assert (tr.rank, tr.world_size, tr.local_rank, tr.master_addr, tr.master_port) == (3, 8, 1, "n1", 29500)
    sl = read_env(
        {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "5", "MASTER_ADDR": "n2", "MASTER_PORT": "6000"}
    )
    assert (sl.rank, sl.world_size, sl.local_rank) == (5, 16, 5)
    with pytest.raises(RuntimeError, match="MASTER_PORT"):
        read_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"})


def test_missing_shards_is_a_message_not_a_traceback(tmp_path, capsys):
    from midtrain.train import distributed

    try:
        # renamed, so `midtrain train` does not build the demo's data: the trainer itself must refuse
        rc = main(
            ["train", "demo_tiny", f"data.path={tmp_path / 'none'}", "name=not_the_demo", f"run_dir={tmp_path / 'run'}"]
        )
    finally:
        distributed.destroy()
    assert rc == 2
    err = capsys.readouterr().err
    assert "data.path" in err and "has no manifest.json" in err


def test_shards_must_fit_the_recipe():
    from midtrain.train.trainer import check_shards

    cfg = TrainConfig().apply_overrides(["data.seq_length=4096", "parallel.context=2"]).validate()
    ok = {"seq_length": 4096, "pad_multiple": 4, "vocab_size": 151669}
    check_shards(cfg, ok)
    with pytest.raises(ConfigError, match="data.seq_length"):
        check_shards(cfg, {**ok, "seq_length": 2048})
    with pytest.raises(ConfigError, match="pad_multiple=4"):
        check_shards(cfg, {**ok, "pad_multiple": 1})
    sp = cfg.apply_overrides(["parallel.tensor=2", "parallel.sequence_parallel=true"]).validate()
    with pytest.raises(ConfigError, match="multiple of 8"):
        check_shards(sp, ok)
    with pytest.raises(ConfigError, match="model.vocab_size"):
        check_shards(cfg, {**ok, "vocab_size": 200_000})
