"""One key for one change, however it was shipped: a task row's gold patch, a pull request's files, a commit.

The key is the sha256 of the change's added and removed lines, each with its file's path (``+``/``-`` lines of
unified diff hunks; headers and context left out), sorted: the squash commit that merged a pull request and the
pull request's own patch have the same key, whatever their order of files or their context lines. The run's
split (midtrain.formats.run_split) finds a held-out task's fix commit among the commits by it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

_COMMIT_HEAD = re.compile(r"^commit [0-9a-f]{12}$", re.MULTILINE)  # midtrain.sources.commits' rendering
_FILE_HEAD = re.compile(r"^diff --git a/(.*?) b/(.*)$", re.MULTILINE)


def diff_files(diff: str) -> list[tuple[str, str]]:
    """(path, section) of each file of a unified diff (``diff --git`` headers)."""
    heads = list(_FILE_HEAD.finditer(diff))
    return [(m[2], diff[m.end() : n.start() if n else len(diff)]) for m, n in zip(heads, [*heads[1:], None])]


def patch_key(files: Iterable[tuple[str, str]]) -> str | None:
    """The key of a change given as (path, hunks) per file; None for one that changes no line."""
    lines = sorted(
        f"{path}\t{line}"
        for path, hunks in files
        for line in hunks.splitlines()
        if line[:1] in ("+", "-") and not line.startswith(("+++ ", "--- "))
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:24] if lines else None


def commit_keys(text: str) -> set[str]:
    """The keys of each commit in a commits document (``commit <sha12>`` headers, each with its diff)."""
    starts = [m.start() for m in _COMMIT_HEAD.finditer(text)] or [0]
    parts = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)])]
    return {k for p in parts if (k := patch_key(diff_files(p)))}
