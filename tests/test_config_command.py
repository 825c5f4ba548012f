"""`midtrain config` resolves any stage's config, and each stage command prints the same with --print-config
(the config the run uses); `midtrain eval swebench --help` names what it runs."""

import yaml

from midtrain.cli import main
from midtrain.eval.benchmarks import BENCHMARKS, HARNESSES


def _yaml(capsys) -> dict:
    return yaml.safe_load(capsys.readouterr().out)


def test_config_prep_prints_reader_and_every_curation_field(capsys):
    assert main(["config", "prep", "repos", "repos.max_doc_bytes=500000", "redact.enabled=false"]) == 0
    data = _yaml(capsys)
    assert data["source"] == "repos" and data["repos"]["max_doc_bytes"] == 500000
    assert data["redact"]["enabled"] is False
    assert {"license", "decontam", "quality", "redact", "dedup"} <= set(data)


def test_prep_print_config_matches_config_prep_with_overrides_anywhere(capsys, tmp_path):
    assert main(["config", "prep", "commits", "commits.max_doc_bytes=100000", "dedup.enabled=false"]) == 0
    expected = capsys.readouterr().out
    assert (
        main(
            [
                "prep",
                "commits",
                "--input",
                str(tmp_path / "repo"),
                "commits.max_doc_bytes=100000",
                "--output",
                str(tmp_path / "out"),
                "--print-config",
                "dedup.enabled=false",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == expected
    assert not (tmp_path / "out").exists()  # printed, nothing run


def test_config_prep_errors_name_the_field(capsys):
    assert main(["config", "prep", "repos", "repos.max_doc_byte=1"]) == 2
    assert "max_doc_bytes" in capsys.readouterr().err
    assert main(["config", "prep", "nosuch"]) == 2
    assert "repos" in capsys.readouterr().err


def test_config_pack_and_pack_print_config_include_the_mixture(capsys, tmp_path):
    assert main(["config", "pack", "seq_length=4096", "mixture.max_repeat=2"]) == 0
    data = _yaml(capsys)
    assert data["seq_length"] == 4096 and data["mixture"]["max_repeat"] == 2
    assert (
        main(
            [
                "pack",
                "--input",
                str(tmp_path),
                "--output",
                str(tmp_path / "o"),
                "--mixture",
                "swe_midtrain",
                "--seq-length",
                "2048",
                "--print-config",
                "seed=7",
            ]
        )
        == 0
    )
    data = _yaml(capsys)
    assert data["seq_length"] == 2048 and data["seed"] == 7 and data["mixture"]["name"] == "swe_midtrain"


def test_sft_and_protocol_and_submit_train_print_config(capsys):
    assert main(["sft", "sft_probe_demo", "--from", "x", "--output", "y", "--print-config", "valid_fraction=0.5"]) == 0
    assert _yaml(capsys)["valid_fraction"] == 0.5
    assert main(["submit", "protocol", "protocol_demo", "--print-config", "baseline=midtrained"]) == 0
    assert _yaml(capsys)["baseline"] == "midtrained"
    assert main(["submit", "train", "demo_tiny", "--print-config", "optim.lr=0.002"]) == 0
    assert _yaml(capsys)["optim"]["lr"] == 0.002
    assert main(["config", "protocol_demo", "baseline=midtrained", "--yaml-only"]) == 0
    assert _yaml(capsys)["baseline"] == "midtrained"


def test_config_recipe_rejects_a_stray_source(capsys):
    assert main(["config", "demo_tiny", "oops"]) == 2
    assert "'oops'" in capsys.readouterr().err


def test_every_command_refuses_a_recipe_of_the_wrong_kind_with_one_message(capsys, tmp_path):
    """Each command resolves its recipe the same way: a recipe of another kind is refused, naming both kinds."""
    out = str(tmp_path / "out")
    cases = [
        (["train", "sft_probe_demo", "--print-config"], "sft", "train"),
        (["sft", "demo_tiny", "--from", out, "--output", out, "--print-config"], "train", "sft"),
        (["pack", "--mixture", "demo_tiny", "--input", out, "--output", out, "--print-config"], "train", "mixture"),
        (["sweep", "protocol_demo", "--dry-run"], "protocol", "sweep"),
        (["submit", "protocol", "demo_tiny", "--print-config"], "train", "protocol"),
        (["submit", "train", "protocol_demo", "--print-config"], "protocol", "train"),
    ]
    for argv, got, wanted in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"is a recipe of kind {got}, not {wanted}" in err, (argv, err)
        assert f"midtrain recipes --kind {wanted}" in err
    assert not (tmp_path / "out").exists()


def test_a_saved_config_yaml_resolves_like_its_recipe(capsys, tmp_path):
    from midtrain.sft.config import SFTConfig
    from recipes import resolve_config

    cfg = resolve_config("sft_probe_demo", SFTConfig, "sft", ["train.optim.lr=5e-4"])
    cfg.save_yaml(tmp_path / "config.yaml")
    again = resolve_config(str(tmp_path / "config.yaml"), SFTConfig, "sft")
    assert again.to_dict() == cfg.to_dict() and again.train.optim.lr == 5e-4


def _printed(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return _yaml(capsys)


def test_config_prints_what_the_protocol_run_uses(tmp_path, capsys):
    """`midtrain config protocol_demo output=X` and `submit protocol ... --print-config` (what the run resolves)
    print one config: the report follows output= there too, so neither names the recipe's .demo/report."""
    for overrides in ([f"output={tmp_path}"], [f"output={tmp_path}", "report_dir=mine"], []):
        shown = _printed(capsys, ["config", "protocol_demo", *overrides, "--yaml-only"])
        used = _printed(capsys, ["submit", "protocol", "protocol_demo", *overrides, "--print-config"])
        assert shown == used, overrides
    assert _printed(capsys, ["config", "protocol_demo", f"output={tmp_path}"])["report_dir"] is None  # OUTPUT/report
    assert _printed(capsys, ["config", "protocol_demo"])["report_dir"] == ".demo/report"


def test_config_of_a_train_recipe_is_what_train_resolves(capsys):
    from recipes import load_train_config

    overrides = ["optim.lr=1e-3", "data.seq_length=256"]
    shown = _printed(capsys, ["config", "demo_tiny", *overrides, "--yaml-only"])
    assert shown == load_train_config("demo_tiny", overrides).to_dict()


def test_eval_help_names_the_harnesses_and_benchmarks(capsys):
    try:
        main(["eval", "swebench", "--help"])
    except SystemExit as e:
        assert e.code == 0
    text = capsys.readouterr().out
    for name in ("SWE-agent", "OpenHands", "mini-swe-agent", "DeepSWE", *HARNESSES, *BENCHMARKS):
        assert name in text, name
