"""The demo's real local inputs for the five sources.

repos and commits read this project's own git repository (the sample repository under data_prep/samples/
turned into a small git history when the package is not in a git checkout); build logs come from running
real tools (make + gcc, pytest, pip) on a tiny failing project at demo time, plus the shipped sample logs;
pulls are the shipped sample records joined with a clone of their repository (:func:`sample_pulls`), and
traces are the shipped samples.
"""

from __future__ import annotations

import json
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
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Demo Author",
        "GIT_AUTHOR_EMAIL": "demo@example.com",
        "GIT_COMMITTER_NAME": "Demo Author",
        "GIT_COMMITTER_EMAIL": "demo@example.com",
        "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    }
    git = lambda *a: subprocess.run(["git", "-C", str(dest), *a], env=env, check=True, capture_output=True)  # noqa: E731
    git("init", "-q", "-b", "main")
    git("add", "README.md", "LICENSE", "minicalc/errors.py", "minicalc/ops.py")
    git("commit", "-q", "-m", "Start minicalc: errors and operators")
    git("add", "-A")
    git("commit", "-q", "-m", "Add parser, evaluator, docs and tests")
    return dest


# The sample repository before pull request #12 fixed division by zero (main after its merge is the sample).
BEFORE_FIX = {
    "minicalc/eval.py": "from minicalc.ops import OPS\nfrom minicalc.parse import parse\n\n\ndef evaluate(expr):\n"
    "    left, op, right = parse(expr)\n    return OPS[op](left, right)\n",
    "tests/test_eval.py": 'from minicalc import evaluate\n\n\ndef test_add():\n    assert evaluate("1 + 2") == 3.0\n',
}
SAMPLE_PULLS_REPO = "acme/minicalc"


def _png_1x1() -> bytes:
    """A real 1x1 PNG (the binary file pull request #14 adds)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\x00\x00\x00\x00\x00", 9))
        + chunk(b"IEND", b"")
    )


def _pulls_clone(clone: Path) -> dict[str, str]:
    """The sample repository's history as its pull requests made it; {name: sha} of the commits they name."""

    def git(*args: str, who: str = "carol-dev", date: str = "2024-02-01T09:00:00Z") -> str:
        email = f"{who}@users.noreply.github.com"  # GitHub's: a commit author is the PR author's login
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": who,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": who,
            "GIT_COMMITTER_EMAIL": email,
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_DATE": date,
        }
        proc = subprocess.run(
            ["git", "-C", str(clone), "-c", "commit.gpgsign=false", *args],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        return proc.stdout.strip()

    def commit(files: dict[str, str | bytes], message: str, **who_date: str) -> str:
        for path, content in files.items():
            (clone / path).parent.mkdir(parents=True, exist_ok=True)
            (clone / path).write_bytes(content if isinstance(content, bytes) else content.encode())
        git("add", *files)
        git("commit", "-q", "-m", message, **who_date)
        return git("rev-parse", "HEAD")

    shutil.copytree(SAMPLES / "repo", clone, ignore=NOT_SAMPLES)
    for path, text in BEFORE_FIX.items():
        (clone / path).write_text(text)
    git("init", "-q", "-b", "main")
    git("remote", "add", "origin", f"https://github.com/{SAMPLE_PULLS_REPO}")
    shas = {
        "start": commit(
            {
                p.relative_to(clone).as_posix(): p.read_bytes()
                for p in sorted(clone.rglob("*"))
                if p.is_file() and ".git" not in p.relative_to(clone).parts
            },
            "Start minicalc: parser, operators, evaluator, docs and tests",
        )
    }
    git("checkout", "-q", "-b", "fix-div0")
    fixed = (SAMPLES / "repo" / "minicalc" / "eval.py").read_text()
    first_test = BEFORE_FIX["tests/test_eval.py"] + (
        '\n\ndef test_div_zero():\n    with pytest.raises(CalcError):\n        evaluate("1 / 0")\n'
    )
    commit(
        {"minicalc/eval.py": fixed, "tests/test_eval.py": first_test},
        "Raise CalcError on division by zero",
        who="alice-w",
        date="2024-03-02T09:55:00Z",
    )
    shas["fix-div0"] = commit(
        {"tests/test_eval.py": (SAMPLES / "repo" / "tests" / "test_eval.py").read_text()},
        "Import pytest and CalcError in the tests",
        who="alice-w",
        date="2024-03-02T12:00:00Z",
    )
    git("checkout", "-q", "main")
    git(
        "merge",
        "-q",
        "--no-ff",
        "fix-div0",
        "-m",
        "Merge pull request #12 from alice-w/fix-div0\n\nFix division by zero in evaluate()",
        date="2024-03-03T09:30:00Z",
    )
    shas["merge-12"] = git("rev-parse", "HEAD")
    git("checkout", "-q", "-b", "pow")
    ops = (
        (SAMPLES / "repo" / "minicalc" / "ops.py")
        .read_text()
        .replace('    "/": operator.truediv,\n', '    "/": operator.truediv,\n    "**": operator.pow,\n')
    )
    shas["pow"] = commit(
        {"minicalc/ops.py": ops, "docs/logo.png": _png_1x1()},
        "Add power operator",
        who="dave99",
        date="2024-03-20T10:00:00Z",
    )
    git("checkout", "-q", "main")
    return shas


def sample_pulls(dest: Path) -> tuple[Path, Path]:
    """The shipped sample pull requests joined with their repository: (records folder, folder of clones).

    The clone (``dest/repos/acme/minicalc``) is the sample repository's history as the pull requests made it:
    the base #12 branched from, #12's two commits merged with GitHub's merge button (main is then the sample
    repository), and #14's open branch. The records (``dest/records/``) are the shipped ones with the base,
    head and merge commits GitHub's API gives set to the clone's (its commit ids depend on git's object format,
    so they are not shipped). Built once.
    """
    records, repos = dest / "records", dest / "repos"
    out = records / "sample_prs.jsonl"
    if out.exists():
        return records, repos
    clone = repos / SAMPLE_PULLS_REPO
    if clone.exists():  # an earlier build that stopped part way
        shutil.rmtree(clone)
    shas = _pulls_clone(clone)
    start_of = {"fix-div0": shas["start"], "pow": shas["merge-12"]}  # main when each branch was opened
    rows = []
    for line in (SAMPLES / "pulls" / "sample_prs.jsonl").read_text().splitlines():
        pr = json.loads(line)
        ref = (pr.get("head") or {}).get("ref")
        if pr.get("repo") == SAMPLE_PULLS_REPO and ref in start_of:
            pr["base"] = {**pr.get("base", {}), "sha": start_of[ref]}
            pr["head"] = {**pr["head"], "sha": shas[ref]}
            if pr.get("merged"):
                pr["merge_commit_sha"] = shas[f"merge-{pr['number']}"]
        rows.append(json.dumps(pr, ensure_ascii=False) + "\n")
    records.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(rows))
    tmp.replace(out)  # written last: its presence means the clone is complete
    return records, repos


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
        "pip": [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--find-links",
            str(project),
            "minicalc-missing-dependency==9.9",
        ],
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
