"""A run's outputs follow its output: a path the recipe defaults beside its own output (protocol_demo's
report_dir .demo/report) is resolved under the `output=` a user gives, unless the user sets it too, so two
runs never write one report and nothing lands in the current directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from midtrain.cli import main


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_protocol_report_lands_under_output(tmp_path, monkeypatch):
    """`submit protocol protocol_demo output=DIR --local`, run twice with two outputs from one directory: each
    report is under its own DIR/report, and the recipe's .demo/report is never written."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for name in ("a", "b"):
        out = tmp_path / name
        # checkpoints that do not exist: each probe fails at once, the report step still runs (after every chain)
        rc = main(
            [
                "submit",
                "protocol",
                "protocol_demo",
                f"output={out}",
                f"checkpoints.base={tmp_path}/none",
                f"checkpoints.midtrained={tmp_path}/none2",
                "--local",
            ]
        )
        assert rc == 1  # the failed probes
        report = out / "report" / "report.md"
        assert report.is_file(), _files(tmp_path)
        # the report is of this run's columns: their checkpoints, missing, named with the reason
        assert f"base: missing: {tmp_path}/none: no complete checkpoint there" in report.read_text()
    assert not (cwd / ".demo").exists() and os.listdir(cwd) == []


def test_protocol_report_dir_follows_output_in_the_submitted_jobs(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["submit", "protocol", "protocol_demo", f"output={out}", "--dry-run"]) == 0
    scripts = capsys.readouterr().out
    assert f"--output {out}/report" in scripts and ".demo/report" not in scripts
    assert main(["submit", "protocol", "protocol_demo", f"output={out}", "--print-config"]) == 0
    assert "report_dir: null" in capsys.readouterr().out


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ([], ".demo/report"),  # the recipe's own output: its own report dir (the demo's layout)
        (["output=elsewhere"], None),  # None: OUTPUT/report
        (["output=elsewhere", "report_dir=mine"], "mine"),  # set by the user: kept
        (["report_dir=mine"], "mine"),
    ],
)
def test_follow_output_rule(overrides, expected):
    from midtrain.protocol import ProtocolConfig, follow_output, report_argv
    from recipes import resolve_config

    cfg = follow_output(
        resolve_config("protocol_demo", ProtocolConfig, "protocol", overrides, validate=False), overrides
    ).validate()
    assert cfg.report_dir == expected
    argv = report_argv(cfg)
    assert argv[argv.index("--output") + 1] == (expected or str(Path(cfg.output) / "report"))


def test_sweep_paths_follow_output(tmp_path, capsys):
    """Every path a sweep writes (setup, each variant's shards, run, probe and evals, its report) is under
    output=; the inputs it reads (.demo/prep) are the only paths elsewhere."""
    out = tmp_path / "sw"
    assert main(["sweep", "sweep_demo", f"output={out}", "--dry-run"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if ": midtrain " in line]
    assert lines
    for line in lines:
        words = line.split()
        for flag in ("--output", "run_dir", "data_dir", "data.path"):
            for i, w in enumerate(words):
                value = words[i + 1] if w == flag else w.split("=", 1)[1] if w.startswith(f"{flag}=") else None
                if value is not None:
                    assert value.startswith(str(out)), line
