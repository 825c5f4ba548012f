"""A pull request joined with its repository: the code read at the base commit, the commits in order.

``pulls.repos=DIR`` names a folder of local clones or bare mirrors, found by the PR's ``owner/name`` as
``DIR/owner/name``, ``DIR/owner__name`` or ``DIR/owner+name`` (each also with ``.git``, or holding a bare
``repo`` folder as the mirror tool lays them out). A git repository given as an input is its own clone: its
merge commits on the checked-out branch are its pull requests (:func:`history_pulls`).

What was read: the files the PR changes, as they were at the base commit, then (``files+imports``) the
modules they import within the repository, breadth first over the import graph `prep repos` orders files by
(:func:`midtrain.sources.ordering.file_dependencies`), nearest first, until the token budget is spent. Each
file goes through the repository reader's filters (lock files, generated, minified, binary, data, vendored,
private keys, too large); what is left out is counted by reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from midtrain.sources.common import decode_utf8, looks_binary
from midtrain.sources.filters import path_skip_reason, text_skip_reason
from midtrain.sources.git import (
    commit_author,
    diff,
    is_git_repo,
    list_tree,
    merge_base,
    merge_commits,
    read_blobs,
    remote_name,
)
from midtrain.sources.licenses import detect_spdx, is_license_file
from midtrain.sources.ordering import file_dependencies

# the data card's estimate for code with a ~150K-vocabulary BPE tokenizer (midtrain.pack.datacard.BYTES_PER_TOKEN)
BYTES_PER_TOKEN = 3.6
CONTEXT_MODES = ("none", "files", "files+imports")
_PR_MERGE = re.compile(r"^Merge pull request #(\d+) from (\S+)")
_PR_SQUASH = re.compile(r"\(#(\d+)\)\s*$")
_SECTION = re.compile(r"^diff --git a/(.*?) b/(.*)$", re.MULTILINE)


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` estimated from its UTF-8 bytes (the budget is kept without a tokenizer)."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


def clone_candidates(repos_dir: Path, repo: str) -> list[Path]:
    """Where a clone of ``owner/name`` may lie under ``repos_dir``, in the order they are tried."""
    owner, _, name = repo.partition("/")
    if not owner or not name or ".." in repo or repo.startswith("/"):
        return []
    out = []
    for stem in (repos_dir / owner / name, repos_dir / f"{owner}__{name}", repos_dir / f"{owner}+{name}"):
        out += [stem, stem.with_name(stem.name + ".git"), stem / "repo"]
    return out


def find_clone(repos_dir: str | Path, repo: str | None) -> Path | None:
    """The clone of ``repo`` (owner/name, matched case-insensitively as a fallback) under ``repos_dir``, or None."""
    if not repo:
        return None
    root = Path(repos_dir)
    for cand in clone_candidates(root, repo) + clone_candidates(root, repo.lower()):
        if is_git_repo(cand):
            return cand
    return None


def clone_name(repo: Path) -> str:
    """owner/name of a clone: its origin remote, else its folder (``owner+name/repo``, ``owner__name.git``)."""
    named = remote_name(repo)
    if named:
        return named
    folder = repo.parent.name if repo.name == "repo" else repo.name.removesuffix(".git")
    for sep in ("+", "__"):
        if sep in folder:
            return folder.replace(sep, "/", 1)
    return folder


def license_at(repo: Path, rev: str) -> str | None:
    """The SPDX id of the LICENSE/COPYING file at the root of ``rev``, or None."""
    entries = [e for e in list_tree(repo, rev) if "/" not in e.path and is_license_file(e.path) and e.mode != "120000"]
    for _, data in read_blobs(repo, [e.sha for e in sorted(entries, key=lambda e: e.path)]):
        spdx = detect_spdx(data.decode("utf-8", "replace"))
        if spdx:
            return spdx
    return None


# -- diffs ------------------------------------------------------------------------------------------------
def diff_sections(patch: str) -> list[tuple[str, str, str]]:
    """(old path, new path, section text) for each file of a unified diff (``diff --git`` sections)."""
    heads = list(_SECTION.finditer(patch))
    out = []
    for m, nxt in zip(heads, heads[1:] + [None]):
        out.append((m.group(1), m.group(2), patch[m.start(): nxt.start() if nxt else len(patch)]))
    return out


def section_file(old: str, new: str, section: str) -> dict:
    """A GitHub-API-like ``files`` entry (filename, status, additions, deletions, patch) of one diff section."""
    status = "modified"
    if re.search(r"^new file mode", section, re.MULTILINE):
        status = "added"
    elif re.search(r"^deleted file mode", section, re.MULTILINE):
        status = "removed"
    elif old != new:
        status = "renamed"
    hunk = section.find("\n@@")
    patch = section[hunk + 1:] if hunk >= 0 else ""
    lines = patch.splitlines()
    entry = {"filename": new if status != "removed" else old, "status": status, "patch": patch,
             "additions": sum(ln.startswith("+") for ln in lines), "deletions": sum(ln.startswith("-") for ln in lines)}
    if status == "renamed":
        entry["previous_filename"] = old
    return entry


# -- pull requests from git history -----------------------------------------------------------------------
def history_pulls(repo: Path, name: str | None) -> Iterator[tuple[str, dict]]:
    """(where, record) for each pull request merged into the checked-out branch: a merge commit whose message
    names it (``Merge pull request #N from owner/branch``, or a title ending ``(#N)``). Its base is the merge
    base of the two parents, its head the second parent; the record has the GitHub-API-like fields the reader
    takes (the PR's title and description are the merge message's, its author the head commit's). The merges
    are listed now (a repository git cannot read fails here); each PR's diff is read as its record comes."""
    return _history_records(repo, name, merge_commits(repo))


def _history_records(repo: Path, name: str | None, merges: list) -> Iterator[tuple[str, dict]]:
    for sha, parents, author, _email, ts, message in merges:
        if len(parents) != 2:
            continue
        subject, _, rest = message.partition("\n")
        m = _PR_MERGE.match(subject)
        number, head_ref = (int(m.group(1)), m.group(2).split("/", 1)[-1]) if m else (None, None)
        if m:  # GitHub's merge button: the PR title is the message body's first line
            title, _, body = rest.strip().partition("\n")
        else:
            sq = _PR_SQUASH.search(subject)
            if not sq:
                continue
            number, title, body = int(sq.group(1)), subject[: sq.start()].strip(), rest
        base = merge_base(repo, parents[0], parents[1])
        if base is None:
            continue
        files = [section_file(o, n, s) for o, n, s in diff_sections(diff(repo, base, parents[1]).decode(
            "utf-8", "replace"))]
        yield f"{repo}@{sha[:12]}", {
            "repo": name, "number": number, "title": title.strip() or subject, "body": body.strip(),
            "state": "closed", "merged": True, "merge_commit_sha": sha,
            "user": {"login": commit_author(repo, parents[1])[0] or author, "type": "User"},
            "base": {"ref": "main", "sha": base}, "head": {"ref": head_ref or f"pr-{number}", "sha": parents[1]},
            "files": files, "merged_at": ts,
        }


# -- what was read at the base commit ---------------------------------------------------------------------
@dataclass
class ReadFile:
    path: str
    why: str  # "changed by this pull request" | "imported by <path>"
    distance: int  # 0: a changed file; 1: imported by one; ...
    block: str  # as the document holds it: a blank line, the header, the content (its own line ending)


def read_block(header: str, path: str, sha: str, why: str, text: str) -> str:
    """A read file as the document holds it (the budget counts exactly this, plus the line ending)."""
    return "\n" + header.format(path=path, sha=sha[:12], why=why) + "\n" + text.rstrip("\n") + "\n"


def base_context(repo: Path, base: str, changed: list[str], mode: str, budget_tokens: int, header: str,
                 max_file_bytes: int = 500_000) -> tuple[list[ReadFile], dict[str, int]]:
    """The files read at ``base`` (nearest first, within ``budget_tokens`` counting each file's ``header``,
    formatted with path/sha/why) and {reason: count} of files left out."""
    skipped: dict[str, int] = {}
    if mode == "none" or not changed:
        return [], skipped
    entries = {e.path: e for e in list_tree(repo, base) if e.mode not in ("160000", "120000")}
    all_paths = dict.fromkeys(entries, "")  # module resolution needs every path; only the read ones are parsed
    seen: set[str] = set()
    level: list[tuple[str, str]] = [(p, "changed by this pull request") for p in dict.fromkeys(changed)
                                    if p in entries]
    seen.update(p for p, _ in level)
    out: list[ReadFile] = []
    left = budget_tokens
    distance = 0
    while level and left > 0:
        texts: dict[str, str] = {}
        wanted = []
        for path, why in level:
            reason = path_skip_reason(path, entries[path].size, max_file_bytes)
            if reason:
                skipped[reason] = skipped.get(reason, 0) + 1
            else:
                wanted.append((path, why))
        blobs = dict(read_blobs(repo, sorted({entries[p].sha for p, _ in wanted})))
        for path, why in wanted:
            data = blobs[entries[path].sha]
            text = None if looks_binary(data) else decode_utf8(data)
            reason = ("binary" if looks_binary(data) else "not_utf8") if text is None else text_skip_reason(path, text)
            if reason:
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            assert text is not None  # no skip reason: the decoded text
            block = read_block(header, path, base, why, text)
            cost = estimate_tokens(block)
            if distance == 0:  # what a changed file imports is worth reading even when the file is too long
                texts[path] = text
            if cost > left:
                skipped["context_budget"] = skipped.get("context_budget", 0) + 1
                continue
            left -= cost
            texts[path] = text  # a read file leads to what it imports
            out.append(ReadFile(path, why, distance, block))
        if mode != "files+imports":
            break
        deps = file_dependencies({**all_paths, **texts})
        nxt = []
        for path, _ in level:
            for dep in sorted(deps.get(path, ())) if path in texts else ():
                if dep not in seen:
                    seen.add(dep)
                    nxt.append((dep, f"imported by {path}"))
        level, distance = nxt, distance + 1
    return out, skipped
