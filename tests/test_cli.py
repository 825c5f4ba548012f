import subprocess
import sys

import pytest
import yaml

from midtrain.cli import COMMANDS, main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "midtrain.cli", *args], capture_output=True, text=True)


def test_config_prints_yaml_with_override():
    r = run_cli("config", "demo_tiny", "optim.lr=0.001", "data.seq_length=1024", "--yaml-only")
    assert r.returncode == 0, r.stderr
    data = yaml.safe_load(r.stdout)
    assert data["optim"]["lr"] == 0.001
    assert data["data"]["seq_length"] == 1024


def test_config_misspelled_field_fails_with_suggestion():
    r = run_cli("config", "demo_tiny", "optim.lrr=0.1")
    assert r.returncode != 0
    assert "optim.lrr" in r.stderr and "did you mean 'lr'" in r.stderr


def test_config_wrong_type_names_field_and_type():
    r = run_cli("config", "demo_tiny", "optim.train_steps=lots")
    assert r.returncode != 0
    assert "optim.train_steps" in r.stderr and "expected int" in r.stderr


def test_config_validation_error_names_field():
    r = run_cli("config", "demo_tiny", "model.num_query_groups=3")
    assert r.returncode != 0
    assert "model.num_query_groups" in r.stderr


def test_unknown_recipe_suggests(capsys):
    assert main(["config", "demo_tiy"]) == 2
    assert "did you mean 'demo_tiny'" in capsys.readouterr().err


def test_recipes_lists_demo(capsys):
    assert main(["recipes"]) == 0
    assert "demo_tiny" in capsys.readouterr().out


@pytest.mark.parametrize("cmd", [c.name for c in COMMANDS] + ["recipes", "config"])
def test_every_command_has_help_with_example(cmd):
    r = run_cli(cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert "example" in r.stdout.lower()
