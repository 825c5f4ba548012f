"""The real-model experiment's pinned corpus: this repository at a recorded commit, read from git.

The live checkout moves with every commit (its HEAD, its newest commits, and every local branch the commits
reader walks), so the same recipe midtrained on other data at each commit. :func:`pinned_checkout` builds a
repository of its own holding only the recorded commit's history (one branch, ``pinned``, fetched from the
checkout's git objects, never from its working tree), checked out clean at that commit: the repos and commits
readers and the vendored traces all read from there. :func:`corpus_digest` names what they read — the commit,
its tree's blobs and the history — so two runs can show they read the same corpus.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

BRANCH = "pinned"


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, input=stdin)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:3])} in {repo}: {proc.stderr.strip().splitlines()[-1:] or '?'}")
    return proc.stdout


def pinned_checkout(source: Path, commit: str, dest: Path) -> Path:
    """DEST: a git repository whose only branch is COMMIT's history, checked out at COMMIT (built once)."""
    if (dest / ".git").is_dir():
        head = _git(dest, "rev-parse", "HEAD").strip()
        if not head.startswith(commit.lower()):
            raise ValueError(f"{dest}: a pinned corpus at {head[:12]}, not the recorded {commit[:12]}; remove it")
        return dest
    tmp = dest.with_name(f".{dest.name}.tmp")
    subprocess.run(["rm", "-rf", str(tmp)], check=True)
    tmp.mkdir(parents=True)
    _git(tmp, "init", "-q")
    # every branch and tag of the checkout, into a namespace no reader walks; the commit must be in one
    _git(tmp, "fetch", "-q", "--no-tags", str(source.absolute()), "+refs/heads/*:refs/source/*")
    try:
        full = _git(tmp, "rev-parse", "--verify", f"{commit}^{{commit}}").strip()
    except RuntimeError:
        raise ValueError(
            f"corpus commit {commit}: not in the history of {source} (a shallow or partial clone? fetch it)"
        ) from None
    _git(tmp, "checkout", "-q", "-B", BRANCH, full)
    refs = _git(tmp, "for-each-ref", "--format=delete %(refname)", "refs/source")
    _git(tmp, "update-ref", "--stdin", stdin=refs)
    tmp.rename(dest)
    return dest


def corpus_digest(checkout: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """{commit, tree, history, digest}: what the readers read of CHECKOUT (its HEAD's tree, blob by blob, and
    every commit on its branches), plus EXTRA (installed package versions, say) in the digest."""
    head = _git(checkout, "rev-parse", "HEAD").strip()
    h = hashlib.sha256()
    h.update(_git(checkout, "ls-tree", "-r", "--full-tree", "HEAD").encode())
    history = _git(checkout, "rev-list", "HEAD", "--branches")
    h.update(history.encode())
    for k, v in sorted((extra or {}).items()):
        h.update(f"{k}={v}\n".encode())
    return {
        "commit": head,
        "tree": _git(checkout, "rev-parse", "HEAD^{tree}").strip(),
        "commits": str(len(history.split())),
        "digest": h.hexdigest(),
    }
