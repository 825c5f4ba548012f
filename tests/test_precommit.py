"""The pre-commit hooks (.pre-commit-config.yaml) run make lint's checks on a commit, with the real pre-commit.

A scratch git repository holds the project's hook config and pyproject.toml (its ruff and mypy settings), a
`.venv` link to the environment running the tests (the hooks call `.venv/bin/ruff` and `.venv/bin/python -m
mypy`, as in a checkout after `make venv`) and one small module in each directory mypy reads. The documented
`pre-commit install` line runs there as shown; then a clean commit lands, and a badly formatted file, a type
error or a subject over 72 characters stops its commit with the failing hook named.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from documented_examples import REPO, documented_examples

INSTALL = ".venv/bin/pre-commit install"


def _git(repo: Path, *args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=check)


def _commits(repo: Path, env: dict[str, str]) -> int:
    return int(_git(repo, "rev-list", "--count", "HEAD", env=env).stdout)


@pytest.fixture
def scratch(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in (".pre-commit-config.yaml", "pyproject.toml"):
        shutil.copy(REPO / name, repo / name)
    (repo / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    # mypy's configured files: each directory must exist
    for package in ("midtrain", "recipes", "tests", "bench", "data_prep"):
        (repo / package).mkdir()
        (repo / package / f"{package}_names.py").write_text(
            f'"""{package}."""\n\n\ndef name() -> str:\n    return "{package}"\n'
        )
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-cache"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,  # a user's own hooksPath or templates must not decide the outcome
    }
    _git(repo, "init", "-q", "-b", "main", env=env)
    (repo / ".gitignore").write_text(".venv\n.mypy_cache/\n.ruff_cache/\n")
    return repo, env


def test_readme_shows_the_install_line() -> None:
    assert INSTALL in [cmd for _, cmd in documented_examples()]


def test_hooks_stop_a_bad_commit(scratch: tuple[Path, dict[str, str]]) -> None:
    repo, env = scratch
    subprocess.run(["bash", "-c", INSTALL], cwd=repo, env=env, check=True, capture_output=True, text=True)
    assert (repo / ".git" / "hooks" / "pre-commit").is_file()

    _git(repo, "add", "-A", env=env)
    clean = _git(repo, "commit", "-q", "-m", "clean", env=env, check=False)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert _commits(repo, env) == 1

    # not ruff format's layout (it would write {"a": 1}); nothing ruff check's rules flag
    (repo / "midtrain" / "spacing.py").write_text('"""Spacing."""\n\nX = {  "a":1 }\n')
    _git(repo, "add", "-A", env=env)
    bad = _git(repo, "commit", "-q", "-m", "badly formatted", env=env, check=False)
    out = bad.stdout + bad.stderr
    assert bad.returncode != 0, out
    assert "hook id: ruff-format" in out and "--> midtrain/spacing.py" in out, out
    assert "hook id: ruff\n" not in out and "hook id: mypy" not in out, out  # the format check alone fails
    assert _commits(repo, env) == 1

    (repo / "midtrain" / "spacing.py").write_text('"""Spacing."""\n\nX = {"a": 1}\n')
    (repo / "bench" / "typed.py").write_text('"""Typed."""\n\n\ndef count() -> int:\n    return "three"\n')
    _git(repo, "add", "-A", env=env)
    typed = _git(repo, "commit", "-q", "-m", "type error", env=env, check=False)
    out = typed.stdout + typed.stderr
    assert typed.returncode != 0, out
    assert 'bench/typed.py:5: error: Incompatible return value type (got "str", expected "int")' in out, out
    assert _commits(repo, env) == 1

    (repo / "bench" / "typed.py").write_text('"""Typed."""\n\n\ndef count() -> int:\n    return 3\n')
    _git(repo, "add", "-A", env=env)
    fixed = _git(repo, "commit", "-q", "-m", "fixed", env=env, check=False)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert _commits(repo, env) == 2

    # the commit-msg hook: a subject over CONTRIBUTING.md's 72 characters stops its commit, 72 pass (a body too)
    assert (repo / ".git" / "hooks" / "commit-msg").is_file()
    (repo / "midtrain" / "more.py").write_text('"""More."""\n')
    _git(repo, "add", "-A", env=env)
    long = _git(repo, "commit", "-q", "-m", "s" * 73, "-m", "why", env=env, check=False)
    out = long.stdout + long.stderr
    assert long.returncode != 0 and "hook id: commit-subject" in out, out
    assert _commits(repo, env) == 2
    short = _git(repo, "commit", "-q", "-m", "s" * 72, "-m", "w" * 200, env=env, check=False)
    assert short.returncode == 0, short.stdout + short.stderr
    assert _commits(repo, env) == 3
