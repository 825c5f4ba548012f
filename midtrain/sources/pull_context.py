"""A pull request joined with its repository: the code read at the base commit, the commits in order.

``pulls.repos=DIR`` names a folder of local clones or bare mirrors, found by the PR's ``owner/name`` as
``DIR/owner/name``, ``DIR/owner__name`` or ``DIR/owner+name`` (each also with ``.git``, or holding a bare
``repo`` folder as the mirror tool lays them out). A git repository given as an input is its own clone: the
pull requests merged or squashed into any of its branches are its pull requests (:func:`history_pulls`).

What was read: the repository's file tree at the base commit (:func:`file_tree`: bounded, folders folded past
the bound, those down to the changed files opened first), the files the PR changes, as they were at the base
commit (source first, then tests, other files, changelogs last; a file too long for what is left of the budget
as windows around its edited hunks), then (``files+imports``) the modules they import within the repository
and the tests named for them, breadth first over the import graph `prep repos` orders files by
(:func:`midtrain.sources.ordering.file_dependencies`), nearest first, until the token budget is spent. Each
file goes through the repository reader's filters (lock files, generated, minified, binary, data, vendored,
private keys, too large); what is left out is counted by reason.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from midtrain.sources.bots import is_bot_name
from midtrain.sources.common import decode_utf8, looks_binary
from midtrain.sources.filters import path_skip_reason, text_skip_reason
from midtrain.sources.git import (
    TreeEntry,
    branch_lines,
    commit_summary,
    diff,
    first_commit_summary,
    first_parent_line,
    history_commits,
    is_git_repo,
    list_tree,
    merge_base,
    read_blobs,
    remote_name,
    rev_list,
)
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


def clone_name(repo: Path) -> str | None:
    """owner/name of a clone: its origin remote when that is a forge's URL, else its folder when laid out as
    ``owner+name/repo`` or ``owner__name.git``; None otherwise (a local path says nothing of the project)."""
    named = remote_name(repo)
    if named:
        return named
    folder = clone_folder(repo)
    for sep in ("+", "__"):
        if sep in folder:
            return folder.replace(sep, "/", 1)
    return None


def clone_folder(repo: Path) -> str:
    """The folder name a clone goes by (``owner+name`` of ``owner+name/repo``, ``lib`` of ``lib.git``)."""
    return repo.parent.name if repo.name == "repo" else repo.name.removesuffix(".git")


# -- diffs ------------------------------------------------------------------------------------------------
def diff_sections(patch: str) -> list[tuple[str, str, str]]:
    """(old path, new path, section text) for each file of a unified diff (``diff --git`` sections)."""
    heads = list(_SECTION.finditer(patch))
    out = []
    for m, nxt in zip(heads, heads[1:] + [None]):
        out.append((m.group(1), m.group(2), patch[m.start() : nxt.start() if nxt else len(patch)]))
    return out


_HUNK = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")
_SWAPPED_HEADERS = {
    "new file mode ": "deleted file mode ",
    "deleted file mode ": "new file mode ",
    "rename from ": "rename to ",
    "rename to ": "rename from ",
    "old mode ": "new mode ",
    "new mode ": "old mode ",
}


def reverse_patch(patch: str) -> str:
    """The unified diff that undoes ``patch`` (what ``git apply -R`` applies): old and new sides swapped in
    every header and hunk, each run of changes written removals first. A SWE-smith task's patch introduces
    its bug; reversed, it is the fix."""
    out: list[str] = []
    run: list[tuple[str, list[str]]] = []  # the changed lines of one run: (sign, [line, its "\ No newline"])

    def flush() -> None:
        out.extend(x for sign in "-+" for s, lines in run if s == sign for x in lines)
        run.clear()

    in_hunk = False  # "--- x" inside a hunk is a removed line "-- x", not a file header
    for line in patch.split("\n"):
        if line.startswith("diff --git "):
            in_hunk = False
        elif line.startswith("@@ "):
            in_hunk = True
        if line.startswith(("+", "-")) and (in_hunk or not line.startswith(("+++ ", "--- "))):
            run.append(("-" if line[0] == "+" else "+", [("-" if line[0] == "+" else "+") + line[1:]]))
            continue
        if line.startswith("\\") and run:  # "\ No newline at end of file" belongs to the line before it
            run[-1][1].append(line)
            continue
        flush()
        if m := re.match(r"^diff --git a/(.*?) b/(.*)$", line):
            line = f"diff --git a/{m.group(2)} b/{m.group(1)}"
        elif m := re.match(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$", line):
            line = f"index {m.group(2)}..{m.group(1)}{m.group(3)}"
        elif m := _HUNK.match(line):
            line = f"@@ -{m.group(2)} +{m.group(1)} @@{m.group(3)}"
        else:
            line = next((new + line[len(old) :] for old, new in _SWAPPED_HEADERS.items() if line.startswith(old)), line)
        out.append(line)
    flush()
    # the file header pair: "--- a/X" and "+++ b/Y" become "--- a/Y" and "+++ b/X" (before a hunk header)
    for i in range(len(out) - 2):
        if out[i].startswith("--- ") and out[i + 1].startswith("+++ ") and out[i + 2].startswith("@@ "):
            old, new = out[i][4:], out[i + 1][4:]
            out[i] = "--- " + (("a/" + new[2:]) if new.startswith("b/") else new)
            out[i + 1] = "+++ " + (("b/" + old[2:]) if old.startswith("a/") else old)
    return "\n".join(out)


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
    patch = section[hunk + 1 :] if hunk >= 0 else ""
    lines = patch.splitlines()
    entry = {
        "filename": new if status != "removed" else old,
        "status": status,
        "patch": patch,
        "additions": sum(ln.startswith("+") for ln in lines),
        "deletions": sum(ln.startswith("-") for ln in lines),
    }
    if status == "renamed":
        entry["previous_filename"] = old
    return entry


# -- pull requests from git history -----------------------------------------------------------------------
def history_pulls(repo: Path, name: str | None, found: dict[str, int] | None = None) -> Iterator[tuple[str, dict]]:
    """(where, record) for each pull request in the history of any branch (local or remote-tracking), each
    number once: a two-parent merge ``Merge pull request #N from owner/branch`` (GitHub's merge button: base =
    the merge base of the parents, head = the second parent), else a one-parent commit whose subject ends
    ``(#N)`` (a squash or rebase merge: base = its parent, head = itself), else a two-parent merge titled
    ``... (#N)``. The record has the GitHub-API-like fields the reader takes (title and description from the
    message; the base branch the one whose first-parent line holds the merge; who opened it the author of the
    PR's first commit; the fork owner's login as the head's user). A merge whose commits hold other PRs'
    merges and no commit besides theirs is a sync PR (``Merge stable into main``): ``found_as`` "sync" with
    the numbers it carries (a PR branch that merged another branch midway has commits of its own).
    ``found`` gets {kind: PRs}, and ``repeated_number``: commits naming a PR already found (backports,
    reverts, a squash of a merged PR). The commits are listed now (a repository git cannot read fails here);
    each PR's diff is read as it comes."""
    chosen: dict[int, tuple[tuple[int, int], str, tuple]] = {}  # number -> ((kind rank, off main), kind, commit)
    repeated = 0
    branches = branch_lines(repo)
    mainline = branches[0][1] if branches else first_parent_line(repo)  # of two commits naming one PR, HEAD's
    history = history_commits(repo)
    branches += merged_branch_lines(history, set().union(*(line for _, line in branches)))  # after the live ones
    for c in history:
        subject, _, _rest = c[5].partition("\n")
        m, sq = _PR_MERGE.match(subject), _PR_SQUASH.search(subject)
        if m and len(c[1]) == 2:
            kind, number = "merge", int(m.group(1))
        elif sq and len(c[1]) == 1:
            kind, number = "squash", int(sq.group(1))
        elif sq and len(c[1]) == 2:
            kind, number = "merge_titled", int(sq.group(1))
        else:
            continue
        rank = (("merge", "squash", "merge_titled").index(kind), c[0] not in mainline)
        if number in chosen:
            repeated += 1
            if rank >= chosen[number][0]:
                continue
        chosen[number] = (rank, kind, c)
    counts: dict[str, int] = {}
    for _, kind, _c in chosen.values():
        counts[kind] = counts.get(kind, 0) + 1
    if repeated:
        counts["repeated_number"] = repeated
    if found is not None:
        found.update(counts)
    picked = sorted(chosen.items(), key=lambda kv: (kv[1][2][4], kv[0]))  # oldest first
    numbers = {c[0]: n for n, (_, _, c) in chosen.items()}  # the commit that merged each PR -> its number
    return _history_records(repo, name, [(n, kind, c) for n, (_, kind, c) in picked], branches, numbers)


# a merge subject naming the branch merged: "Merge branch '8.0.x'", "Merge remote-tracking branch
# 'origin/stable' into main", "Merge pull request #12 from pallets/stable", "Merge stable into main"
_MERGED_BRANCH = re.compile(
    r"^Merge (?:remote-tracking branch '[^/']+/(?P<r>[^']+)'|branch '(?P<a>[^']+)'"
    r"|pull request #\d+ from [^/\s]+/(?P<b>\S+)|(?P<c>[\w./-]+) into \S+)"
)
# a sync branch named for what it carries: "stable-into-main-2", "merge-8.0.x-into-8.1.x"
_SYNC_BRANCH = re.compile(r"(?:merge-|sync-)?(.+?)-into-[\w.]+?(?:-\d+)?")


def merged_branch_lines(history: list[tuple], live: set[str]) -> list[tuple[str, set[str]]]:
    """(branch name, its first-parent line) of the branches merges name that no live branch holds any more
    (a maintenance branch merged and deleted): from each merge whose subject names its branch, the second
    parent's first-parent line down to a commit already placed; newest merge first."""
    parents = {c[0]: c[1] for c in history}
    placed = set(live)
    out: dict[str, set[str]] = {}
    for _sha, ps, _a, _e, _t, message in reversed(history):
        m = _MERGED_BRANCH.match(message.partition("\n")[0])
        if len(ps) != 2 or not m:
            continue
        name = m.group("r") or m.group("a") or m.group("b") or m.group("c")
        name = sync.group(1) if (sync := _SYNC_BRANCH.fullmatch(name)) else name
        line, at = out.setdefault(name, set()), ps[1]
        while at and at not in placed:
            line.add(at)
            placed.add(at)
            at = (parents.get(at) or [None])[0]
    return [(name, line) for name, line in out.items() if line]


def _base_branch(sha: str, branches: list[tuple[str, set[str]]]) -> str | None:
    """The branch a merge was made on: the first (HEAD's, the others by name, then the merged ones) whose
    first-parent line holds it."""
    return next((name for name, line in branches if sha in line), None)


def _history_records(
    repo: Path, name: str | None, picked: list, branches: list[tuple[str, set[str]]], numbers: dict[str, int]
) -> Iterator[tuple[str, dict]]:
    for number, kind, (sha, parents, author, email, ts, message) in picked:
        subject, _, rest = message.partition("\n")
        login, head_ref = None, None
        if kind == "merge":  # the merge button: the PR title is the message body's first line
            owner_branch = _PR_MERGE.match(subject).group(2)  # type: ignore[union-attr]
            login, _, head_ref = owner_branch.partition("/") if "/" in owner_branch else ("", "", owner_branch)
            login = login or None
            title, _, body = rest.strip().partition("\n")
        else:
            sq = _PR_SQUASH.search(subject)
            title, body = subject[: sq.start()].strip() if sq else subject, rest
        if kind == "squash":
            base, head = parents[0], sha
        else:
            base, head = merge_base(repo, parents[0], parents[1]), parents[1]
        if base is None:
            continue
        carried: list[int] = []
        if kind != "squash":  # a sync PR's range holds other PRs' merges, and no commit of its own besides
            merges = [c for c in rev_list(repo, f"{base}..{head}") if c in numbers and numbers[c] != number]
            if merges and not rev_list(repo, f"{base}..{head}", "--no-merges", *(f"^{c}" for c in merges)):
                carried = sorted({numbers[c] for c in merges})
        files = [section_file(o, n, s) for o, n, s in diff_sections(diff(repo, base, head).decode("utf-8", "replace"))]
        opener = (author, email, subject) if kind == "squash" else first_commit_summary(repo, base, head)
        opener = opener or commit_summary(repo, head)
        if not title.strip():  # an empty merge message: the head commit's subject, never the login-bearing one
            title = commit_summary(repo, head)[2]
        user = {"login": login or opener[0] or author, "type": "User", "name": opener[0] or author}
        user["email"] = opener[1] or email
        # a bot's PR from a branch of the repository itself ("from pallets/dependabot/pip/tox-3.15.1") names the
        # repository's owner, not the bot: its first commit's author (GitHub's "dependabot[bot]") opened it
        if is_bot_name(opener[0], opener[1]):
            user = {"login": opener[0] or "bot[bot]", "type": "Bot"}
        head_info: dict = {"ref": head_ref or f"pr-{number}", "sha": head}
        if login:
            head_info["user"] = {"login": login, "type": "User"}
        record = {
            "repo": name,
            "clone": clone_folder(repo),
            "number": number,
            "title": title.strip() or f"Pull request #{number}",
            "body": body.strip(),
            "state": "closed",
            "merged": True,
            "merge_commit_sha": sha,
            "found_as": "sync" if carried else kind,
            "user": user,
            "base": {"ref": _base_branch(sha, branches), "sha": base},
            "head": head_info,
            "files": files,
            "merged_at": ts,
        }
        if carried:
            record["carries"] = carried
        yield f"{repo}@{sha[:12]}", record


_INDEX = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)", re.MULTILINE)


def sequence_applies(base: list[TreeEntry], diffs: list[str]) -> bool:
    """Whether each diff, in order, edits the file as the base and the diffs before it left it: every
    ``index OLD..NEW`` line's OLD blob is the one the path holds by then (a PR branch that merged its base
    branch midway has later commits made on files the base does not show)."""
    blobs = {e.path: e.sha for e in base}
    for text in diffs:
        for old, new, sec in diff_sections(text):
            m = _INDEX.search(sec.split("\n@@", 1)[0])
            if m is None:  # a pure rename or a mode change: the content moves as it is
                if old != new and old in blobs:
                    blobs[new] = blobs.pop(old)
                continue
            before, after = m.group(1), m.group(2)
            held = blobs.get(old, "0" * 40)
            if not held.startswith(before) and not (set(before) == {"0"} and old not in blobs):
                return False
            blobs.pop(old, None)
            if set(after) != {"0"}:  # a deleted file holds nothing after
                blobs[new] = after
    return True


# -- what was read at the base commit ---------------------------------------------------------------------
@dataclass
class ReadFile:
    path: str
    why: str  # "changed by this pull request" | "imported by <path>"
    distance: int  # 0: a changed file; 1: imported by one; ...
    block: str  # as the document holds it: a blank line, the header, the content (its own line ending)
    whole: bool = True  # False: windows around the edited hunks


def read_block(header: str, path: str, sha: str, why: str, text: str) -> str:
    """A read file as the document holds it (the budget counts exactly this, plus the line ending)."""
    return "\n" + header.format(path=path, sha=sha[:12], why=why) + "\n" + text.rstrip("\n") + "\n"


CHANGELOG_NAMES = ("changes", "changelog", "news", "history")  # CHANGES.rst, CHANGELOG.md, NEWS, HISTORY.txt
SOURCE_SUFFIXES = (
    ".py",
    ".pyi",
    ".pyx",
    ".c",
    ".h",
    ".cc",
    ".cpp",
    ".hpp",
    ".rs",
    ".go",
    ".java",
    ".kt",
    ".js",
    ".jsx",
    ".ts",
    ".tsx",
    ".rb",
    ".php",
    ".cs",
    ".swift",
    ".scala",
    ".sh",
    ".lua",
    ".jl",
    ".r",
)
WINDOW_LINES = 40  # lines shown either side of an edited hunk of a file too long to read whole


def relevance(path: str) -> int:
    """Reading order of a changed file: 0 source, 1 its tests, 2 anything else (docs, config), 3 changelogs
    (every PR of a project edits the same CHANGES file: long, and it says nothing about the code)."""
    name = path.rsplit("/", 1)[-1].lower()
    if name.split(".", 1)[0] in CHANGELOG_NAMES:
        return 3
    parts = path.lower().split("/")
    if (
        any(p in ("test", "tests", "testing") for p in parts[:-1])
        or name.startswith("test_")
        or name.split(".", 1)[0].endswith(("_test", "_tests"))
    ):
        return 1
    return 0 if name.endswith(SOURCE_SUFFIXES) else 2


def hunk_ranges(patch: str) -> list[tuple[int, int]]:
    """(first line, last line) at the base of each hunk of a file's patch (``@@ -a,b +c,d @@``)."""
    out = []
    for m in re.finditer(r"^@@ -(\d+)(?:,(\d+))? \+", patch, re.MULTILINE):
        start, n = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
        out.append((max(1, start), max(start, start + n - 1)))
    return out


def windowed(text: str, hunks: list[tuple[int, int]], around: int) -> tuple[str, str] | None:
    """(the lines of ``text`` within ``around`` lines of the hunks, with ``...`` where lines are left out;
    the line ranges shown) or None without hunks."""
    lines = text.split("\n")
    spans: list[list[int]] = []
    for a, b in sorted(hunks):
        lo, hi = max(1, a - around), min(len(lines), b + around)
        if spans and lo <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], hi)
        elif lo <= hi:
            spans.append([lo, hi])
    if not spans:
        return None
    parts = []
    for i, (lo, hi) in enumerate(spans):
        if lo > 1 and (i == 0 or lo > spans[i - 1][1] + 1):
            parts.append("...")
        parts.extend(lines[lo - 1 : hi])
    if spans[-1][1] < len(lines):
        parts.append("...")
    return "\n".join(parts), ", ".join(f"{lo}-{hi}" for lo, hi in spans)


def base_context(
    repo: Path,
    base: str,
    changed: list[str],
    mode: str,
    budget_tokens: int,
    header: str,
    max_file_bytes: int = 500_000,
    hunks: dict[str, list[tuple[int, int]]] | None = None,
    windows: frozenset[str] | set[str] = frozenset(),
) -> tuple[list[ReadFile], dict[str, int]]:
    """The files read at ``base`` within ``budget_tokens`` (counting each file's ``header``, formatted with
    path/sha/why) and {reason: count} of files left out. Order: the changed source files, their tests, other
    changed files, (``files+imports``) what the changed files import, nearest first, (``files``) the tests
    named for the changed source files with what the budget has left, then changelogs. A changed
    file over what is left of the budget, or one of ``windows`` (changelogs, files other documents of the
    repository showed whole), is shown as windows around its edited ``hunks`` (base line ranges)."""
    skipped: dict[str, int] = {}
    if mode == "none" or not changed:
        return [], skipped
    hunks = hunks or {}
    entries = {e.path: e for e in tree_at(repo, base) if e.mode not in ("160000", "120000")}
    all_paths = dict.fromkeys(entries, "")  # module resolution needs every path; only the read ones are parsed
    present = sorted((p for p in dict.fromkeys(changed) if p in entries), key=relevance)  # stable: diff order kept
    logs = [(p, "changed by this pull request") for p in present if relevance(p) == 3]
    level: list[tuple[str, str]] = [(p, "changed by this pull request") for p in present if relevance(p) < 3]
    seen: set[str] = set(present)
    out: list[ReadFile] = []
    left = budget_tokens
    distance = 0

    def note(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    def read_level(level: list[tuple[str, str]], distance: int) -> dict[str, str]:
        nonlocal left
        texts: dict[str, str] = {}
        wanted = []
        for path, why in level:
            reason = path_skip_reason(path, entries[path].size, max_file_bytes)
            if reason:
                note(reason)
            else:
                wanted.append((path, why))
        blobs = dict(read_blobs(repo, sorted({entries[p].sha for p, _ in wanted})))
        for path, why in wanted:
            data = blobs[entries[path].sha]
            text = None if looks_binary(data) else decode_utf8(data)
            reason = ("binary" if looks_binary(data) else "not_utf8") if text is None else text_skip_reason(path, text)
            if reason:
                note(reason)
                continue
            assert text is not None  # no skip reason: the decoded text
            block = read_block(header, path, base, why, text)
            cost = estimate_tokens(block)
            if distance == 0:  # what a changed file imports is worth reading even when the file is too long
                texts[path] = text
            whole = True
            if distance == 0 and path in windows and hunks.get(path):  # seen whole elsewhere: its edit's lines
                widths = (WINDOW_LINES // 4, 3) if relevance(path) == 3 else (WINDOW_LINES, WINDOW_LINES // 4, 3)
                view = _window_block(header, path, base, why, text, hunks[path], min(left, cost - 1), widths)
                if view is not None:
                    block, cost, whole = view, estimate_tokens(view), False
                    note("context_windowed_repeated")
            if cost > left:
                view = (
                    _window_block(header, path, base, why, text, hunks.get(path) or [], left) if distance == 0 else None
                )
                if view is None:
                    note("context_budget")
                    continue
                block, cost, whole = view, estimate_tokens(view), False
                note("context_windowed")
            left -= cost
            texts[path] = text  # a read file leads to what it imports
            out.append(ReadFile(path, why, distance, block, whole))
        return texts

    while level and left > 0:
        texts = read_level(level, distance)
        if mode != "files+imports":
            # what the changed files leave of the budget (small, or windowed) goes to the next most relevant
            # files: the tests of the changed source files, whole
            tests: dict[str, str] = {}
            for path, _ in level:
                for test in _tests_of(path, entries) if relevance(path) == 0 else ():
                    if test not in seen:
                        tests.setdefault(test, f"tests {path}")
            seen.update(tests)
            if tests and left > 0:
                read_level(list(tests.items()), 1)
            break
        deps = file_dependencies({**all_paths, **texts})
        nxt = []
        for path, _ in level:
            for dep in sorted(deps.get(path, ())) if path in texts else ():
                if dep not in seen:
                    seen.add(dep)
                    nxt.append((dep, f"imported by {path}"))
        if distance == 0:  # the tests of a changed source file, by name (test_core.py, core_test.go ...)
            for path, _ in level:
                if relevance(path) == 0:
                    for test in _tests_of(path, entries):
                        if test not in seen:
                            seen.add(test)
                            nxt.append((test, f"tests {path}"))
        level, distance = nxt, distance + 1
    if logs and left > 0:
        read_level(logs, 0)
    elif logs:
        skipped["context_budget"] = skipped.get("context_budget", 0) + len(logs)
    return out, skipped


def _tests_of(path: str, entries: dict) -> list[str]:
    """Test files at the base named for the module ``path`` (``test_<stem>.*``, ``<stem>_test.*``)."""
    name = path.rsplit("/", 1)[-1]
    stem, _, suffix = name.rpartition(".")
    if not stem:
        return []
    names = {f"test_{stem}.{suffix}", f"{stem}_test.{suffix}", f"test_{stem}s.{suffix}"}
    return sorted(p for p in entries if p.rsplit("/", 1)[-1] in names and relevance(p) == 1)


def _window_block(
    header: str,
    path: str,
    base: str,
    why: str,
    text: str,
    hunks: list[tuple[int, int]],
    left: int,
    widths: tuple[int, ...] = (WINDOW_LINES, WINDOW_LINES // 4, 3),
) -> str | None:
    """A read block of the lines around the edited hunks that fits in ``left`` tokens (the ``widths`` of
    lines either side tried in turn: a changelog's neighbouring entries say little), or None."""
    total = text.count("\n") + 1
    for around in widths:
        view = windowed(text, hunks, around)
        if view is None:
            return None
        body, shown = view
        block = read_block(header, path, base, f"{why}; lines {shown} of {total}", body)
        if estimate_tokens(block) <= left:
            return block
    return None


# -- the file tree at the base commit ---------------------------------------------------------------------
TREE_HEADER = "[file tree at base commit {sha}: {files} files]"


def file_tree(paths: list[str], changed: list[str], budget_tokens: int, sha: str) -> str | None:
    """The repository's files at ``sha`` as an indented tree of at most ``budget_tokens`` (estimated), or None
    when not even its top level fits. Names sorted within each folder; a folder is listed when it fits: the
    folders down to each changed file first (in reading order: source first), then the others level by level
    (shallow first, by name); one not listed is one line ``name/ (N files)``. The same paths and changed files
    give the same text."""
    kids: dict[str, dict[str, bool]] = {}  # folder ("" the top) -> {child name: is a folder}
    count: dict[str, int] = {}  # folder -> files under it
    for p in paths:
        parts = p.split("/")
        for i in range(len(parts)):
            folder = "/".join(parts[:i])
            count[folder] = count.get(folder, 0) + 1
            kids.setdefault(folder, {})[parts[i]] = i < len(parts) - 1
    if not paths:
        return None
    header = TREE_HEADER.format(sha=sha[:12], files=len(paths))
    limit = int(budget_tokens * BYTES_PER_TOKEN)

    def size(line: str) -> int:
        return len(line.encode("utf-8", "surrogateescape")) + 1  # and its line ending

    def listing(folder: str) -> int:  # bytes its children add when it is listed, each child folder folded
        depth = folder.count("/") + 1 if folder else 0
        total = 0
        for name, is_dir in kids[folder].items():
            sub = f"{folder}/{name}" if folder else name
            total += size("  " * depth + name + (_folded(count[sub]) if is_dir else ""))
        return total

    used = size("") + size(header) + listing("")  # the block's leading blank line, its header, the top level
    if used > limit:
        return None
    opened = {""}
    # the folders down to each changed file, the files in reading order (source first), then the others
    near = ["/".join(p.split("/")[:i]) for p in sorted(changed, key=relevance) for i in range(1, p.count("/") + 1)]
    others = sorted((f for f in kids if f), key=lambda f: (f.count("/"), f))
    for folder in near + others:
        parent = folder.rpartition("/")[0]
        if folder in opened or folder not in kids or parent not in opened:
            continue
        extra = listing(folder) - len(_folded(count[folder])) + 1  # its line keeps the "/"
        if used + extra <= limit:
            opened.add(folder)
            used += extra
    lines = [header]

    def show(folder: str) -> None:
        depth = folder.count("/") + 1 if folder else 0
        for name in sorted(kids[folder]):
            sub = f"{folder}/{name}" if folder else name
            if not kids[folder][name]:
                lines.append("  " * depth + name)
            elif sub in opened:
                lines.append("  " * depth + name + "/")
                show(sub)
            else:
                lines.append("  " * depth + name + _folded(count[sub]))

    show("")
    return "\n" + "\n".join(lines) + "\n"


def _folded(n: int) -> str:
    return f"/ ({n} file{'s' if n != 1 else ''})"


def base_tree(repo: Path, base: str, changed: list[str], budget_tokens: int) -> str | None:
    """:func:`file_tree` of the commit ``base`` of ``repo`` (``git ls-tree``), or None."""
    return file_tree([e.path for e in tree_at(repo, base)], changed, budget_tokens, base)


@functools.lru_cache(maxsize=4)
def _tree_of_commit(repo: Path, sha: str) -> tuple[TreeEntry, ...]:
    return tuple(list_tree(repo, sha))


def tree_at(repo: Path, rev: str) -> list[TreeEntry]:
    """``list_tree`` of ``rev``; a full commit sha's is kept for the next caller (one PR reads its base's tree
    for its file tree, its read files and its licence)."""
    if re.fullmatch(r"[0-9a-f]{40}", rev):
        return list(_tree_of_commit(repo, rev))
    return list_tree(repo, rev)
