"""The demo's real local inputs for the five sources.

repos and commits read this project's own git repository (the sample repository under data_prep/samples/
turned into a small git history when the package is not in a git checkout); build logs come from running
real tools (make + gcc, pytest, pip) on a tiny failing project at demo time, plus the shipped sample logs;
pulls and traces use the shipped samples.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("midtrain.demo.prep")

SAMPLES = Path(__file__).resolve().parents[2] / "data_prep" / "samples"
# Bytecode that running the samples' own tests (or a byte-compiling install) leaves beside them is not part of
# the samples: copied, it would become files of the demo's git history.
NOT_SAMPLES = shutil.ignore_patterns("__pycache__", "*.py[co]")


def project_repo() -> Path | None:
    """This project's git checkout (top level), or None when the package is not inside one."""
    here = Path(__file__).resolve().parent
    proc = subprocess.run(["git", "-C", str(here), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    top = Path(proc.stdout.strip())
    head = subprocess.run(["git", "-C", str(top), "rev-parse", "--verify", "HEAD"], capture_output=True)
    return top if head.returncode == 0 else None


def sample_git_repo(dest: Path) -> Path:
    """The sample repository as a real git repository with a short history (built once)."""
    if (dest / ".git").exists():
        return dest
    shutil.copytree(SAMPLES / "repo", dest, ignore=NOT_SAMPLES)
    env = {**os.environ, "GIT_AUTHOR_NAME": "Demo Author", "GIT_AUTHOR_EMAIL": "demo@example.com",
           "GIT_COMMITTER_NAME": "Demo Author", "GIT_COMMITTER_EMAIL": "demo@example.com",
           "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
    git = lambda *a: subprocess.run(["git", "-C", str(dest), *a], env=env, check=True, capture_output=True)  # noqa: E731
    git("init", "-q", "-b", "main")
    git("add", "README.md", "LICENSE", "minicalc/errors.py", "minicalc/ops.py")
    git("commit", "-q", "-m", "Start minicalc: errors and operators")
    git("add", "-A")
    git("commit", "-q", "-m", "Add parser, evaluator, docs and tests")
    return dest


def run_build_tools(dest: Path) -> Path:
    """Run make, pytest and pip on the tiny failing project; their real logs go to dest/*.log."""
    dest.mkdir(parents=True, exist_ok=True)
    if all((dest / f"{n}.log").exists() for n in ("make", "pytest", "pip")):
        return dest
    project = dest / "project"
    if project.exists():
        shutil.rmtree(project)
    shutil.copytree(SAMPLES / "buildlogs" / "project", project, ignore=NOT_SAMPLES)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    commands = {
        "make": ["make", "-C", str(project)],
        "pytest": [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--color=yes", str(project)],
        # offline on purpose: an empty --find-links makes pip fail the way CI does when a pin does not exist
        "pip": [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(project),
                "minicalc-missing-dependency==9.9"],
    }
    for name, cmd in commands.items():
        try:
            proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
            text = f"$ {' '.join(cmd[:3])} ...\n{proc.stdout}{proc.stderr}\n[exit code {proc.returncode}]\n"
        except (OSError, subprocess.TimeoutExpired) as e:  # a missing tool must not stop the demo
            log.warning("demo build log: %s could not run: %s", name, e)
            continue
        (dest / f"{name}.log").write_text(text)
    shutil.rmtree(project, ignore_errors=True)
    return dest
