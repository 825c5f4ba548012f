"""Helpers for the sources tests: real git repositories built with the real git binary, document readers."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from midtrain.demo.inputs import NOT_SAMPLES

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "data_prep" / "samples"


def source_files(root: Path) -> list[Path]:
    """Every file under root, sorted, without the bytecode caches that running a sample's own tests or
    byte-compiling the checkout leaves there (the demo's NOT_SAMPLES): they are neither text nor fixture."""
    out: list[Path] = []
    for folder, dirs, files in os.walk(root):
        ignored = NOT_SAMPLES(folder, [*dirs, *files])
        dirs[:] = [d for d in dirs if d not in ignored]
        out += [Path(folder) / f for f in files if f not in ignored]
    return sorted(out)


def git(
    repo: Path,
    *args: str,
    author: tuple[str, str] = ("Jane Doe", "jane.doe@example.org"),
    date: str = "2024-01-01T00:00:00Z",
) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": author[0],
        "GIT_AUTHOR_EMAIL": author[1],
        "GIT_COMMITTER_NAME": author[0],
        "GIT_COMMITTER_EMAIL": author[1],
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    proc = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {args} failed: {proc.stderr}")
    return proc.stdout


def write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def make_repo(
    root: Path,
    files: Mapping[str, str | bytes],
    message: str = "initial commit",
    author: tuple[str, str] = ("Jane Doe", "jane.doe@example.org"),
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    write_files(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message, author=author)
    return root


def commit(
    repo: Path,
    files: Mapping[str, str | bytes],
    message: str,
    author=("Jane Doe", "jane.doe@example.org"),
    date: str = "2024-01-02T00:00:00Z",
) -> str:
    write_files(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, author=author, date=date)
    return git(repo, "rev-parse", "HEAD").strip()


def read_documents(out_dir: Path) -> list[dict]:
    """Every document in DIR/documents (or a raw dir), in file order."""
    docs: list[dict] = []
    base = out_dir / "documents" if (out_dir / "documents").exists() else out_dir
    for f in sorted(base.rglob("*.jsonl*")):
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:
            docs.extend(json.loads(line) for line in fh if line.strip())
    return docs


def without_file_path(docs: list[dict]) -> list[dict]:
    """Documents minus ``metadata.file_path`` (a datatrove reader in curation records the raw file it read)."""
    return [{**d, "metadata": {k: v for k, v in d["metadata"].items() if k != "file_path"}} for d in docs]


def run_reader(reader) -> list:
    """Run a reader step in-process (rank 0 of 1) and return its documents."""
    return list(reader.run())
