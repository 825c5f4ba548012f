"""One key for one change, however it was shipped: a task row's gold patch, a pull request's files, a commit.

The key is the sha256 of the change's added and removed lines (``+``/``-`` lines of unified diff hunks, file
headers left out), sorted: the squash commit that merged a pull request and the pull request's own patch have
the same key, whatever their order of files or their context lines. The run's split
(midtrain.formats.run_split) finds a held-out task's fix commit among the commits by it.
"""

from __future__ import annotations

import hashlib
import re

_COMMIT_HEAD = re.compile(r"^commit [0-9a-f]{12}$", re.MULTILINE)  # midtrain.sources.commits' rendering


def changed_lines(diff: str) -> list[str]:
    """The +/- lines of a unified diff (or of bare hunks: a GitHub file ``patch``), headers left out."""
    return [line for line in diff.splitlines() if line[:1] in "+-" and line and not line.startswith(("+++ ", "--- "))]


def patch_key(diff: str) -> str | None:
    """The change's key; None for a diff that changes no line."""
    lines = sorted(changed_lines(diff))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:24] if lines else None


def commit_keys(text: str) -> set[str]:
    """The keys of each commit in a commits document (``commit <sha12>`` headers, each with its diff)."""
    starts = [m.start() for m in _COMMIT_HEAD.finditer(text)] or [0]
    parts = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)])]
    return {k for p in parts if (k := patch_key(p))}
