"""Reading git repositories through the real ``git`` binary (working trees and bare mirrors alike).

Everything is read from the committed tree at HEAD, never from the working directory, so a checkout with
uncommitted edits gives the same documents as its bare mirror.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class GitError(RuntimeError):
    """A repository git cannot read (corrupt, empty, not a repository); the message says which."""


def _git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True)
    if proc.returncode != 0:
        raise GitError(f"git {' '.join(args[:3])} failed in {repo}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def is_git_repo(path: Path) -> bool:
    """True for a working tree's top level or a bare repository (not for a folder inside a checkout)."""
    if not path.is_dir():
        return False
    if (path / ".git").exists():
        return True
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


def head_commit(repo: Path) -> str:
    """HEAD's sha; GitError naming the repository if it is empty or corrupt."""
    try:
        return _git(repo, "rev-parse", "--verify", "HEAD^{commit}").decode().strip()
    except GitError as e:
        raise GitError(f"no readable HEAD commit in {repo} (empty or corrupt repository): {e}") from None


def root_commits(repo: Path) -> list[str]:
    """Shas of the commits without parents in HEAD's history: a history's identity under any name or remote."""
    try:
        return sorted(_git(repo, "rev-list", "--max-parents=0", "HEAD").decode().split())
    except GitError:
        return []


def has_commit(repo: Path, sha: str) -> bool:
    """True when ``sha`` names a commit present in ``repo`` (a shallow or stale clone may lack a PR's base)."""
    if not sha or not re.fullmatch(r"[0-9a-fA-F]{4,64}", sha):
        return False
    proc = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"], capture_output=True)
    return proc.returncode == 0


def resolve_commit(repo: Path, rev: str) -> str:
    """The full sha of a commit-ish (an abbreviated sha, a ref)."""
    return _git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}").decode().strip()


def merge_base(repo: Path, a: str, b: str) -> str | None:
    """The best common ancestor of two commits, or None when they share no history."""
    try:
        return _git(repo, "merge-base", a, b).decode().strip() or None
    except GitError:
        return None


def history_commits(repo: Path, merges_only: bool = False) -> list[tuple[str, list[str], str, str, int, str]]:
    """(sha, parents, author name, author email, author time, message) of every commit reachable from HEAD
    or any branch, local or remote-tracking (a pull request merged into a maintenance branch reaches main
    through a branch merge, or never), parents before children, oldest first; ``merges_only``: the merge
    commits alone."""
    args = ["log", "--date-order", "--reverse", "--format=%H%x00%P%x00%an%x00%ae%x00%at%x00%B%x1e"]
    if merges_only:
        args.append("--merges")
    out = _git(repo, *args, "HEAD", "--branches", "--remotes")  # a plain clone has remote-tracking ones only
    commits = []
    for rec in out.decode("utf-8", "replace").split("\x1e"):
        rec = rec.lstrip("\n")
        if not rec:
            continue
        sha, parents, name, email, ts, msg = rec.split("\0", 5)
        commits.append((sha, parents.split(), name, email, int(ts or 0), msg.strip()))
    return commits


def first_parent_line(repo: Path, rev: str = "HEAD") -> set[str]:
    """The shas on ``rev``'s first-parent line (the commits made on that branch itself)."""
    return set(_git(repo, "rev-list", "--first-parent", rev).decode().split())


def branch_lines(repo: Path) -> list[tuple[str, set[str]]]:
    """(branch name, the shas on its first-parent line) of every branch, local and remote-tracking (named
    without the remote: ``origin/8.1.x`` is ``8.1.x``), HEAD's branch first, then by name; each name once."""
    try:
        head = _git(repo, "symbolic-ref", "--short", "-q", "HEAD").decode().strip()
    except GitError:  # a detached HEAD: no branch of its own
        head = ""
    out = _git(repo, "for-each-ref", "--format=%(refname)", "refs/heads", "refs/remotes").decode().split()
    names: dict[str, str] = {}
    for ref in out:
        if ref.endswith("/HEAD"):  # origin/HEAD points at a branch listed anyway
            continue
        short = ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else ref.split("/", 3)[-1]
        names.setdefault(short, ref)  # a local branch before the remote-tracking one of its name
    order = sorted(names, key=lambda n: (n != head, n))
    return [(n, first_parent_line(repo, names[n])) for n in order]


def rev_list(repo: Path, spec: str, *more: str) -> list[str]:
    """The commits of a range (``base..head``, more options or ``^sha`` exclusions after it), newest first."""
    return _git(repo, "rev-list", spec, *more).decode().split()


def first_commit_summary(repo: Path, base: str, head: str) -> tuple[str, str, str] | None:
    """(author name, author email, subject) of the oldest non-merge commit of ``base..head`` (who opened the
    pull request: the last one may be a bot's fix-up), or None when the range has none."""
    out = _git(repo, "log", "--reverse", "--no-merges", "--format=%an%x00%ae%x00%s%x1e", f"{base}..{head}")
    first = out.decode("utf-8", "replace").split("\x1e", 1)[0].strip("\n")
    if not first:
        return None
    name, email, subject = (first.split("\0", 2) + ["", ""])[:3]
    return name, email, subject


def grep_tree(repo: Path, rev: str, patterns: list[str], paths: list[str] | None = None) -> tuple[int, str]:
    """(exit status, output) of ``git grep -n -I -F -e P ...`` over the tree of ``rev``, each line as a
    checkout of ``rev`` prints it (without the ``rev:`` prefix git adds for a tree)."""
    args = ["git", "-C", str(repo), "grep", "-n", "-I", "-F", *(x for p in patterns for x in ("-e", p)), rev, "--"]
    proc = subprocess.run([*args, *(paths or [])], capture_output=True)
    prefix = f"{rev}:".encode()
    lines = [ln.removeprefix(prefix) for ln in proc.stdout.splitlines()]
    return proc.returncode, b"\n".join(lines).decode("utf-8", "replace") + (proc.stderr.decode("utf-8", "replace"))


def apply_in_turn(repo: Path, base: str, patches: list[str]) -> list[tuple[int, str]]:
    """(exit status, output) of ``git apply`` of each patch in turn onto the tree of ``base``, as a checkout
    would (run for real against a scratch index: ``git apply --cached``); after a failure the rest are not run."""
    out: list[tuple[int, str]] = []
    with tempfile.TemporaryDirectory(prefix="midtrain_apply_") as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        subprocess.run(["git", "-C", str(repo), "read-tree", base], env=env, check=True, capture_output=True)
        for patch in patches:
            proc = subprocess.run(
                ["git", "-C", str(repo), "apply", "--cached", "-"], input=patch.encode(), env=env, capture_output=True
            )
            out.append((proc.returncode, (proc.stdout + proc.stderr).decode("utf-8", "replace")))
            if proc.returncode:
                break
    return out


def commit_author(repo: Path, sha: str) -> tuple[str, str]:
    """(author name, author email) of one commit."""
    name, email, _ = commit_summary(repo, sha)
    return name, email


def commit_summary(repo: Path, sha: str) -> tuple[str, str, str]:
    """(author name, author email, subject line) of one commit."""
    out = _git(repo, "log", "-1", "--format=%an%x00%ae%x00%s", sha).decode("utf-8", "replace").strip()
    name, email, subject = (out.split("\0", 2) + ["", ""])[:3]
    return name, email, subject


def diff(repo: Path, a: str, b: str) -> bytes:
    """The unified diff from commit ``a`` to commit ``b`` (renames detected, no textconv or external diff)."""
    return _git(repo, "diff", "--no-color", "--no-ext-diff", "--find-renames", "--no-textconv", a, b)


def remote_name(repo: Path) -> str | None:
    """owner/name from the origin remote URL when it is a forge's (GitHub, GitLab, ... forms), or None."""
    try:
        url = _git(repo, "config", "--get", "remote.origin.url").decode().strip()
    except GitError:
        return None
    return forge_name(url)


# a forge URL: scheme://[user@]host[:port]/owner/name or scp-like user@host:owner/name (never a local path)
_FORGE_URL = re.compile(r"^(?:(?:https?|ssh|git)://(?:[^@/]+@)?[^/]+/|[\w.-]+@[\w.-]+:)(.+?)(?:\.git)?/*$")


def forge_name(url: str) -> str | None:
    """owner/name of a forge URL (GitHub, GitLab ...: the last two parts of its path); None for a local path
    or ``file://`` URL, whose folders say nothing about the project's name."""
    m = _FORGE_URL.match(url.strip())
    parts = [p for p in m.group(1).split("/") if p] if m else []
    if len(parts) < 2 or not all(re.fullmatch(r"[\w.-]+", p) for p in parts[-2:]):
        return None
    return f"{parts[-2]}/{parts[-1]}"


@dataclass
class TreeEntry:
    path: str
    mode: str  # 100644, 100755, 120000 (symlink), 160000 (submodule)
    sha: str
    size: int  # -1 for submodules


def list_tree(repo: Path, rev: str = "HEAD") -> list[TreeEntry]:
    out = _git(repo, "ls-tree", "-r", "-z", "--long", "--full-tree", rev)
    entries = []
    for rec in out.split(b"\0"):
        if not rec:
            continue
        meta, path = rec.split(b"\t", 1)
        mode, _kind, sha, size = meta.decode().split()
        entries.append(
            TreeEntry(path.decode("utf-8", "surrogateescape"), mode, sha, int(size) if size.isdigit() else -1)
        )  # "-": submodule, "BAD": missing
    return sorted(entries, key=lambda e: e.path)


def read_blobs(repo: Path, shas: list[str]) -> Iterator[tuple[str, bytes]]:
    """(sha, content) for each blob, through one ``git cat-file --batch`` process."""
    if not shas:
        return
    proc = subprocess.Popen(
        ["git", "-C", str(repo), "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin and proc.stdout
    # Write requests from a thread-free loop: one request, one answer, so pipes never fill up.
    try:
        for sha in shas:
            proc.stdin.write(sha.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) < 3 or header[1] == b"missing":
                raise GitError(f"blob {sha} missing in {repo} (corrupt repository)")
            size = int(header[2])
            data = proc.stdout.read(size)
            proc.stdout.read(1)  # trailing newline
            yield sha, data
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


# Commit log, streamed: a marker line starts each commit; the header fields are NUL-separated.
_MARK = "\x1e\x1dMIDTRAIN-COMMIT"
_FORMAT = f"{_MARK}%H%x00%P%x00%an%x00%ae%x00%cn%x00%ce%x00%at%x00%B%x00"


@dataclass
class CommitRecord:
    sha: str
    parents: list[str]
    author_name: str
    author_email: str
    committer_name: str
    committer_email: str
    timestamp: int
    message: str
    diff: bytes  # raw unified diff (empty for merges)
    cut_bytes: int = 0  # bytes of this commit's log output past max_commit_bytes (not kept)


def iter_commits(
    repo: Path, rev: str = "HEAD", max_count: int | None = None, max_commit_bytes: int = 256_000_000
) -> Iterator[CommitRecord]:
    """Commits oldest first (``--date-order`` keeps each commit after its parents), with their patch, streamed:
    at most ``max_commit_bytes`` of one commit's output are held (the rest is counted in ``cut_bytes``)."""
    args = [
        "git",
        "-C",
        str(repo),
        "log",
        "--reverse",
        "--date-order",
        "-p",
        "--no-color",
        "--no-ext-diff",
        "--find-renames",
        "--no-textconv",
        f"--format={_FORMAT}",
    ]
    if max_count:
        args.append(f"--max-count={max_count}")
    args.append(rev)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout and proc.stderr
    mark = _MARK.encode()
    keep = len(mark) - 1  # a marker may straddle two reads: this much of a read waits for the next
    held: list[bytes] = []
    state = {"size": 0, "cut": 0}

    def add(data: bytes) -> None:
        room = max_commit_bytes - state["size"]
        if len(data) > room:
            state["cut"] += len(data) - room
            data = data[:room]
        if data:
            held.append(data)
            state["size"] += len(data)

    def take() -> CommitRecord | None:
        raw, cut = b"".join(held), state["cut"]
        held.clear()
        state.update(size=0, cut=0)
        if not raw:
            return None
        rec = _parse_commit(raw)
        rec.cut_bytes = cut
        return rec

    carry = b""
    try:
        while True:
            chunk = proc.stdout.read(1 << 20)
            if not chunk:
                break
            pieces = (carry + chunk).split(mark)
            for piece in pieces[:-1]:  # each ends where the next commit's marker starts
                add(piece)
                rec = take()
                if rec:
                    yield rec
            last = pieces[-1]
            if len(last) > keep:
                add(last[:-keep])
                last = last[-keep:]
            carry = last
        add(carry)
        rec = take()
        if rec:
            yield rec
    finally:
        proc.stdout.close()
        err = proc.stderr.read().decode(errors="replace").strip()
        proc.stderr.close()
        rc = proc.wait()
    if rc != 0:
        raise GitError(f"git log failed in {repo}: {err}")


def _parse_commit(raw: bytes) -> CommitRecord:
    fields = raw.split(b"\0", 8)
    sha, parents, an, ae, cn, ce, ts, msg, rest = fields
    dec = lambda b: b.decode("utf-8", "replace")  # noqa: E731 - header fields only
    return CommitRecord(
        dec(sha),
        dec(parents).split(),
        dec(an),
        dec(ae),
        dec(cn),
        dec(ce),
        int(ts or 0),
        dec(msg).strip(),
        rest.lstrip(b"\n"),
    )
