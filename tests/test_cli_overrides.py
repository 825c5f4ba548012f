"""One override parser for every command: key=value words anywhere on the command line."""

import subprocess
import sys

import pytest
import yaml

from midtrain.cli import build_parser
from midtrain.cli_parser import is_override


def _parse(line: str):
    return build_parser().parse_args(line.split())


@pytest.mark.parametrize(
    "line, overrides, check",
    [
        (
            "prep commits --input REPO --output DIR commits.max_doc_bytes=500000",
            ["commits.max_doc_bytes=500000"],
            {"input": ["REPO"], "output": "DIR"},
        ),
        (
            "prep repos redact.enabled=false --input a b dedup.enabled=false --output o quality.enabled=false",
            ["redact.enabled=false", "dedup.enabled=false", "quality.enabled=false"],
            {"input": ["a", "b"]},
        ),
        ("submit train demo_tiny --nodes 2 --dry-run optim.lr=1e-5", ["optim.lr=1e-5"], {"nodes": 2, "dry_run": True}),
        ("submit protocol protocol_demo checkpoints.base=x --local", ["checkpoints.base=x"], {"local": True}),
        ("train demo_tiny --print-config optim.lr=1e-3", ["optim.lr=1e-3"], {"print_config": True}),
        (
            "pack --input p/a p/b seed=1 --output s pad_multiple=16",
            ["seed=1", "pad_multiple=16"],
            {"input": ["p/a", "p/b"]},
        ),
        (
            "eval proxy shards=s --checkpoint c --output o retrieval.lengths=[512,1024]",
            ["shards=s", "retrieval.lengths=[512,1024]"],
            {"checkpoint": "c"},
        ),
        ("sft sft_probe_demo a=1 --from x --output y b=2", ["a=1", "b=2"], {"start": "x"}),
        (
            "config demo_tiny optim.lr=1e-3 --yaml-only data.seq_length=4096",
            ["optim.lr=1e-3", "data.seq_length=4096"],
            {"yaml_only": True},
        ),
    ],
)
def test_overrides_anywhere_for_every_command(line, overrides, check):
    args = _parse(line)
    assert args.overrides == overrides
    for key, value in check.items():
        assert getattr(args, key) == value, key


def test_an_option_value_that_looks_like_an_override_stays_with_its_option():
    args = _parse("submit train demo_tiny --site-set train.nodes=2 optim.lr=1e-5")
    assert args.site_set == ["train.nodes=2"] and args.overrides == ["optim.lr=1e-5"]
    args = _parse("submit train demo_tiny --site-s train.nodes=2")  # abbreviated option, argparse-style
    assert args.site_set == ["train.nodes=2"] and args.overrides == []


def test_commands_without_overrides_keep_their_own_name_equals_value_positionals():
    args = _parse("report base=runs/b midtrained=runs/m --output rep")
    assert args.runs == ["base=runs/b", "midtrained=runs/m"]


def test_a_stray_word_is_an_error_naming_it(capsys):
    with pytest.raises(SystemExit):
        _parse("train demo_tiny oops")
    assert "'oops'" in capsys.readouterr().err


def test_override_shape():
    assert is_override("a.b_c.d=1") and is_override("seed=1") and is_override("mixture.tokens.repos=5")
    assert not is_override("out/prep=x") and not is_override("=1") and not is_override("--a=1")


def test_the_issue_examples_run_end_to_end(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "midtrain.cli", *a], capture_output=True, text=True)  # noqa: E731
    r = run("train", "demo_tiny", "--print-config", "optim.lr=1e-3")
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout)["optim"]["lr"] == 0.001
    r = run("submit", "train", "qwen3_8b_256k_h200", "--nodes", "2", "--dry-run", "optim.lr=1e-5")
    assert r.returncode == 0, r.stderr
    assert "#SBATCH --nodes=2" in r.stdout
    r = run("submit", "train", "qwen3_8b_256k_h200", "--nodes", "2", "--dry-run", "optim.lrr=1e-5")
    assert r.returncode == 2 and "did you mean 'lr'" in r.stderr  # the trailing override reached the config
