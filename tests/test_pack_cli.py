"""`midtrain pack` and `midtrain inspect` through the real CLI, plus named mixtures and the pure packer."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from pack_helpers import commit_doc, trace_doc, write_prep

from midtrain.cli import main
from midtrain.pack.packer import best_fit_decreasing, split_points


@pytest.fixture(scope="module")
def packed_cli(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    rng = random.Random(1)
    write_prep(root / "prep" / "commits", [commit_doc(i, rng) for i in range(30)])
    write_prep(root / "prep" / "traces", [trace_doc(i)[0] for i in range(6)])
    rc = main(
        [
            "pack",
            "--input",
            str(root / "prep" / "commits"),
            str(root / "prep" / "traces"),
            "seed=3",
            "--output",
            str(root / "shards"),
            "--seq-length",
            "512",
            "--mixture",
            "natural",
            "valid_fraction=0.2",
        ]
    )
    assert rc == 0
    return root / "shards"


@pytest.mark.slow
def test_pack_and_inspect_json(packed_cli, capsys):
    capsys.readouterr()
    assert main(["inspect", str(packed_cli), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    for key in ("seq_length", "sequences", "tokens", "padding_tokens", "fill", "split_documents", "sources"):
        assert key in s
    assert s["seq_length"] == 512 and s["tokens"] + s["padding_tokens"] == s["sequences"] * 512
    assert set(s["sources"]) == {"commit", "trace"}
    assert all({"target_tokens", "tokens"} <= set(v) for v in s["sources"].values())
    assert s["sources"]["trace"]["valid_tokens"] > 0  # every source with two documents has held-out data
    manifest = json.loads((packed_cli / "manifest.json").read_text())
    assert manifest["seed"] == 3 and manifest["config"]["valid_fraction"] == 0.2


@pytest.mark.slow
def test_inspect_text_sample_and_png(packed_cli, capsys, tmp_path):
    assert main(["inspect", str(packed_cli), "--sample", "0", "--png", str(tmp_path / "h.png")]) == 0
    out = capsys.readouterr().out
    assert "fill" in out and "commit" in out
    assert "⟦doc " in out and "part 1/1 source" in out
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["inspect", str(packed_cli), "--sample", "100000"]) == 1
    assert main(["inspect", str(tmp_path)]) == 1


def test_pack_errors(tmp_path, capsys):
    assert main(["pack", "--input", str(tmp_path), "--output", str(tmp_path / "o")]) == 1
    assert "midtrain prep" in capsys.readouterr().err
    assert main(["pack", "--input", str(tmp_path), "--output", str(tmp_path / "o"), "seq_lenght=5"]) == 2
    assert "seq_length" in capsys.readouterr().err
    assert main(["pack", "--input", str(tmp_path), "--output", str(tmp_path / "o"), "--mixture", "demo_tiny"]) == 2


def test_pack_checks_inputs_before_the_tokenizer(tmp_path, capsys):
    # the tokenizer does not exist either: the missing input is what is reported, on stderr
    assert (
        main(
            [
                "pack",
                "--input",
                str(tmp_path / "nothing"),
                "--output",
                str(tmp_path / "o"),
                "--tokenizer",
                str(tmp_path / "no_tokenizer.json"),
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert "nothing" in captured.err and "no documents" in captured.err and not captured.out


def test_inspect_and_report_errors_go_to_stderr(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "none")]) == 1
    captured = capsys.readouterr()
    assert "midtrain inspect" in captured.err and not captured.out
    assert main(["report"]) == 2
    captured = capsys.readouterr()
    assert "midtrain report" in captured.err and not captured.out


def test_mixture_recipes_build():
    from midtrain.pack.mixture import MixtureConfig
    from recipes import all_recipes, resolve_config

    mixes = {n: r for n, r in all_recipes().items() if r.kind == "mixture"}
    assert {"natural", "swe_midtrain", "swe_midtrain_500b"} <= set(mixes)
    for r in mixes.values():
        r.build().validate()
    assert resolve_config("swe_midtrain_500b", MixtureConfig, "mixture").total_tokens == 500_000_000_000


def test_best_fit_decreasing_properties():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 100, size=2000)
    bins = best_fit_decreasing(lengths, 100)
    assert sorted(i for b in bins for i in b) == list(range(2000))  # each item exactly once
    assert all(lengths[b].sum() <= 100 for b in bins)
    assert len(bins) <= np.ceil(lengths.sum() / 100) * 1.02 + 1  # BFD is near optimal on uniform sizes
    assert best_fit_decreasing([60, 50, 40, 30, 20], 100) == [[0, 2], [1, 3, 4]]
    padded = best_fit_decreasing([5, 3, 3], 8, pad_multiple=4)  # 8, 4, 4
    assert sorted(map(sorted, padded)) == [[0], [1, 2]]
    with pytest.raises(ValueError, match="outside"):
        best_fit_decreasing([101], 100)


def test_split_points_prefer_files_then_lines():
    # files start at 30, 70, 150; lines end every 7 tokens
    lines = np.arange(7, 200, 7)
    assert split_points(90, 100, [30, 70]) == [90]  # fits: never split
    assert split_points(200, 100, [30, 70, 150], lines) == [70, 150, 200]
    assert split_points(200, 100, [], lines) == [98, 196, 200]
    assert split_points(200, 100, [], None) == [100, 200]
    assert split_points(200, 100, [5], lines) == [98, 196, 200]  # a file boundary leaving a sliver is ignored
    assert split_points(250, 100, [], None, pad_multiple=16) == [96, 192, 250]


def test_slurm_dry_run_prints_chained_job_arrays(tmp_path, capsys):
    rng = random.Random(2)
    write_prep(tmp_path / "prep" / "commits", [commit_doc(i, rng) for i in range(4)], files=2)
    site = tmp_path / "site.yaml"
    site.write_text("partition: cpu\naccount: proj\nprep:\n  time: '01:00:00'\n")
    # --site-config: the deprecated spelling of --site still works
    rc = main(
        [
            "pack",
            "--input",
            str(tmp_path / "prep" / "commits"),
            "--output",
            str(tmp_path / "shards"),
            "--seq-length",
            "4096",
            "tasks=3",
            "--executor",
            "slurm",
            "--site-config",
            str(site),
            "--dry-run",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    stages = {s.split(" ----", 1)[0]: s for s in out.split("# ---- stage ")[1:]}  # name -> its script
    order = list(stages)
    # the input is tokenized (and its cache stamped) before anything packs it, the packers before the manifest
    tokenize = [n for n in order if n.startswith("tokenize")]
    assert tokenize and max(map(order.index, tokenize)) < order.index("pack") < order.index("manifest"), order
    assert "#SBATCH --partition=cpu" in out and "#SBATCH --account=proj" in out
    assert "#SBATCH --array=0-1" in stages[tokenize[0]]  # 2 files -> 2 tokenize tasks
    assert "#SBATCH --array=0-2" in stages["pack"] and "#SBATCH --array=0-0" in stages["manifest"]  # tasks=3
    assert "launch_pickled_pipeline" in out
    assert not (tmp_path / "shards" / "manifest.json").exists()


@pytest.mark.slow
def test_inspect_card_of_shards_covers_their_inputs(packed_cli, capsys):
    capsys.readouterr()
    assert main(["inspect", str(packed_cli), "--card"]) == 0
    out = capsys.readouterr().out
    assert "# Data card:" in out and "## Input:" in out
    card = json.loads((packed_cli / "datacard.json").read_text())
    assert set(card["by_source"]) == {"commit", "trace"}
    assert {Path(c["prep_dir"]).name for c in card["inputs"]} == {"commits", "traces"}
    # the tokenize cache pack wrote under each prep dir makes the input cards' token counts exact
    assert all(c["tokens_exact"] for c in card["inputs"])
    packed = (
        card["by_source"]["commit"]["tokens"]
        + json.loads((packed_cli / "manifest.json").read_text())["sources"]["commit"]["valid_tokens"]
    )
    assert sum(c["tokens"] for c in card["inputs"] if Path(c["prep_dir"]).name == "commits") == packed
    assert (packed_cli / "datacard.png").read_bytes()[:4] == b"\x89PNG"
