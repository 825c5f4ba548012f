"""buildlogs source: logs produced by running real tools (pip, pytest, make) in the test, plus the samples."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sources_fixtures import SAMPLES, run_reader

from midtrain.sources.buildlogs import BuildLogReader, BuildLogsConfig, clean_log


@pytest.fixture(scope="module")
def real_logs(tmp_path_factory):
    d = tmp_path_factory.mktemp("logs")
    proj = d / "proj"
    proj.mkdir()
    (proj / "test_x.py").write_text(
        "def test_ok():\n    assert 1\n\ndef test_bad():\n    value = {'a': 1}\n    assert value['a'] == 2\n"
    )
    (proj / "Makefile").write_text("all:\n\t@echo building\n\tgcc -c missing.c -o missing.o\n")
    runs = {
        "pytest": [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--color=yes", "-q", str(proj)],
        "make": ["make", "-C", str(proj)],
        "pip": [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--find-links",
            str(proj),
            "--disable-pip-version-check",
            "surely-not-a-package==0.0.1",
        ],
    }
    for name, cmd in runs.items():
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=proj)
        assert proc.returncode != 0, name  # each tool really failed
        (d / f"{name}.log").write_text(proc.stdout + proc.stderr)
    return d


@pytest.mark.slow
def test_real_tool_logs_keep_their_failure(real_logs):
    reader = BuildLogReader([str(real_logs)])
    docs = {d.id: d for d in run_reader(reader)}
    assert set(docs) == {"buildlog:make.log", "buildlog:pip.log", "buildlog:pytest.log"}
    pytest_log = docs["buildlog:pytest.log"]
    assert "\x1b[" not in pytest_log.text  # --color=yes escapes stripped
    assert "assert 1 == 2" in pytest_log.text and "FAILED" in pytest_log.text
    assert pytest_log.metadata["tool"] == "pytest" and pytest_log.metadata["status"] == "failure"
    assert "missing.c" in docs["buildlog:make.log"].text and docs["buildlog:make.log"].metadata["tool"] == "make"
    assert (
        "surely-not-a-package" in docs["buildlog:pip.log"].text and docs["buildlog:pip.log"].metadata["tool"] == "pip"
    )
    assert all(d.metadata["source"] == "buildlog" for d in docs.values())


def test_sample_github_actions_log_cleaned():
    [doc] = run_reader(BuildLogReader([str(SAMPLES / "buildlogs" / "logs" / "github_actions_pytest.log")]))
    text = doc.text
    assert "2024-03-02T" not in text and "\x1b" not in text  # timestamps and ANSI gone
    assert "[... 37 similar lines collapsed ...]" in text  # the 40 progress lines
    assert "Progress: 20/100" in text and "Progress: 98/100" in text  # first and last of the run kept
    assert "E   ZeroDivisionError: float division by zero" in text and doc.metadata["tool"] == "github-actions"


def test_cap_keeps_failure_context_whole_and_marks_cuts():
    # distinct lines (letters g-z only, so no masking makes them near-identical): only the cap applies
    noise = ["compiling unit_" + "".join(chr(103 + (i // 20**k) % 20) for k in range(4)) for i in range(3000)]
    assert len(set(noise)) > 2000
    failure = [
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in <module>',
        "    main()",
        "ValueError: bad value",
    ]
    lines = noise[:1500] + failure + noise[1500:]
    cfg = BuildLogsConfig(max_doc_bytes=20_000, context_lines=5, head_lines=10, tail_lines=10)
    text, counts = clean_log("\n".join(lines), cfg)
    assert len(text) <= 20_000 + 200
    assert "\n".join(failure) in text  # whole, in order
    ctx_before, ctx_after = noise[1495:1500], noise[1500:1505]
    assert all(line in text for line in ctx_before + ctx_after)
    assert text.startswith(noise[0]) and text.rstrip().endswith(noise[-1])
    assert counts["cut_lines"] > 0 and text.count("lines cut ...]") >= 2


def test_timestamps_and_progress_redraws():
    raw = (
        "2024-01-02 12:34:56,789 INFO start\n[12:00:01] step one\n12:00:02.5 step two\n"
        "Downloading 10%\rDownloading 50%\rDownloading 100%\n\x1b]0;title\x07\x1b[1;31merror: boom\x1b[0m\n"
    )
    text, _ = clean_log(raw, BuildLogsConfig())
    assert text == "INFO start\nstep one\nstep two\nDownloading 100%\nerror: boom\n"


def test_jsonl_records_and_bad_input(tmp_path):
    f = tmp_path / "ci.jsonl"
    good = {
        "id": "run-1",
        "repo": "acme/x",
        "job": "test",
        "conclusion": "failure",
        "text": "collected 1 item\nFAILED test_a.py::test_a - assert 0\n",
    }
    f.write_bytes(
        b"\n".join(
            [
                json.dumps(good).encode(),
                b"{oops",
                b'{"log": "\xff\xfe"}',
                b'{"no_text": 1}',
                json.dumps({**good, "id": "run-2", "text": "ok"}).encode(),
            ]
        )
        + b"\n"
    )
    (tmp_path / "binary.log").write_bytes(b"\x00\x01\x02binary")
    latin = tmp_path / "latin.log"
    latin.write_bytes(b"error: caf\xe9 not found in module table\n")
    reader = BuildLogReader([str(tmp_path)])
    docs = run_reader(reader)
    assert [d.id for d in docs] == ["buildlog:run-1", "buildlog:latin.log"]
    assert docs[0].metadata["repo"] == "acme/x" and docs[0].metadata["job"] == "test"
    assert "caf\ufffd" in docs[1].text
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["error/malformed_json"] == 1 and stats["error/invalid_utf8"] == 1
    assert stats["error/bad_record"] == 1 and stats["error/binary_file"] == 1
    assert stats["dropped/too_short"] == 1 and stats["skip/invalid_utf8_replaced"] == 1
