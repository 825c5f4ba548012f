"""Commit histories -> documents of consecutive commits (message + unified diff), oldest first.

Commits are taken in chronological order (``git log --reverse --date-order``, renames detected) and grouped
into runs whose text stays under ``max_doc_bytes``, so every document starts at a commit header. Authors and
committers become ``author_<n>`` (numbered per repository, also where their names or emails appear in
messages, e.g. ``Signed-off-by``). Explicit policies, each counted (``skip/<reason>``):

- each file of a diff goes through the repository reader's file filters (lock files and pinned
  requirements, generated, minified, binary, SVG and data files, vendored paths, private keys): its whole
  section is removed and its path recorded in ``metadata["removed_files"]`` (bounded) with the reason;
- a file section larger than ``max_diff_bytes`` is removed the same way (never cut mid-hunk), and so are
  the sections that would take the commit's diff over that size;
- commits left with no diff, and formatting-only commits (the same code modulo whitespace, quotes and
  trailing commas), are skipped; so are merge commits (or kept as a message-only entry);
- commits by bots (dependabot, renovate, ``[bot]`` accounts ...) are skipped, or kept and counted in
  ``metadata["bot_commits"]``/``bot_bytes`` with ``bots="mark"``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from datatrove.data import Document

from midtrain.config import require
from midtrain.formats.run_split import RunSplit
from midtrain.formats.run_split import read as read_run_split
from midtrain.sources.bots import is_bot_name
from midtrain.sources.common import Pseudonyms, ReaderConfig, SourceReader, make_document
from midtrain.sources.filters import path_skip_reason, text_skip_reason
from midtrain.sources.git import (
    CommitRecord,
    GitError,
    head_commit,
    is_git_repo,
    iter_commits,
    remote_name,
    root_commits,
)
from midtrain.sources.licenses import license_at
from midtrain.sources.privacy import scrub_message


@dataclass
class CommitsConfig(ReaderConfig):
    """Commit-history documents."""

    max_doc_bytes: int = 1_000_000
    max_diff_bytes: int = 200_000  # per commit; the rest of a huge diff is cut with a marker
    merges: Literal["skip", "message"] = "skip"
    max_commits: int = 0  # per repository, newest history kept; 0 = all
    skip_empty: bool = True  # commits with no diff (e.g. --allow-empty) are skipped
    file_filters: bool = True  # remove files the repository reader would skip (lock, generated, SVG ...)
    extra_skip_dirs: list[str] = field(default_factory=list)  # as repos.extra_skip_dirs: files under them removed
    skip_formatting: bool = True  # commits that only reformat code (whitespace, quotes, trailing commas)
    bots: Literal["skip", "mark", "keep"] = "skip"
    max_removed_paths: int = 200  # per document: removed file paths recorded with their reason
    # the run's split file (midtrain.formats.run_split; a pack's and the probe's ``split``, named apart from a
    # table input's dataset ``split``): its held-out instances' fix commits are left out here, counted
    # skip/heldout_fix_commit (every pack of the run leaves out those of a prep made before it too)
    run_split: str | None = None

    def check(self) -> None:
        super().check()
        require(self.max_removed_paths >= 0, "max_removed_paths", "must be >= 0")
        require(self.max_diff_bytes >= 1000, "max_diff_bytes", "must be at least 1000")
        require(self.max_commits >= 0, "max_commits", "must be >= 0")


_FILE_START = re.compile(rb"^diff --git ", re.MULTILINE)
_FILE_PATHS = re.compile(r"^diff --git a/(.*?) b/(.*)$", re.MULTILINE)


def is_bot(name: str, email: str) -> bool:
    """Accounts of dependency updaters, CI and other automation (by name or e-mail local part)."""
    return is_bot_name(name, email)


def split_files(diff: bytes) -> list[bytes]:
    """A commit's diff cut into one section per file (each starting at its ``diff --git`` line)."""
    starts = [m.start() for m in _FILE_START.finditer(diff)]
    if not starts:
        return [diff] if diff.strip() else []
    return [diff[a:b] for a, b in zip(starts, starts[1:] + [len(diff)])]


def section_path(section: str) -> str:
    m = _FILE_PATHS.match(section)
    return m.group(2) if m else ""


def _changed_lines(section: str, sign: str) -> list[str]:
    return [line[1:] for line in section.splitlines() if line.startswith(sign) and not line.startswith(sign * 3)]


def file_skip_reason(section: str, extra_skip_dirs: list[str] | tuple[str, ...] = ()) -> str | None:
    """The repository reader's reason to leave this file out, judged from its diff section."""
    path = section_path(section)
    reason = path_skip_reason(path, extra_skip_dirs=extra_skip_dirs)
    if reason:
        return reason
    if re.search(r"^(?:Binary files .* differ|GIT binary patch)$", section, re.MULTILINE):
        return "binary"
    added = _changed_lines(section, "+")
    return text_skip_reason(path, "\n".join(added)) if added else None


_FORMAT_NOISE = re.compile(r"\s+|,(?=[)\]}])")


def formatting_only(sections: list[str]) -> bool:
    """Every changed file holds the same code before and after, modulo whitespace, line breaks, quote style
    and trailing commas (what black, prettier or gofmt change)."""
    changed = False
    for sec in sections:
        old = _FORMAT_NOISE.sub("", "".join(_changed_lines(sec, "-"))).replace("'", '"').replace(",)", ")")
        new = _FORMAT_NOISE.sub("", "".join(_changed_lines(sec, "+"))).replace("'", '"').replace(",)", ")")
        if old != new or re.search(r"^(?:new|deleted) file mode|^rename from", sec, re.MULTILINE):
            return False
        changed = changed or bool(old or new)
    return changed


class CommitReader(SourceReader):
    """datatrove reader: each input path is one git repository; its history becomes documents."""

    name = "🕑 commits"
    source = "commits"

    config_class: type[CommitsConfig] = CommitsConfig
    cfg: CommitsConfig

    @functools.cached_property
    def _fixes(self) -> RunSplit | None:
        """The run's split (read once per worker), or None without one."""
        return read_run_split(self.cfg.run_split) if self.cfg.run_split else None

    def _filter_diff(self, c: CommitRecord, removed: list[tuple[str, str]]) -> list[str]:
        """The file sections of a commit that stay, in order; the others are counted and listed."""
        kept, size = [], 0
        for raw in split_files(c.diff):
            sec = raw.decode("utf-8", "replace")
            if "\ufffd" in sec and b"\xef\xbf\xbd" not in raw:
                self.skip("invalid_utf8_replaced")  # text kept, undecodable bytes shown as U+FFFD
            reason = file_skip_reason(sec, self.cfg.extra_skip_dirs) if self.cfg.file_filters else None
            n = len(raw)
            if reason is None and n > self.cfg.max_diff_bytes:
                reason = "huge_file_diff"
            elif reason is None and size + n > self.cfg.max_diff_bytes:
                reason = "diff_over_cap"
            if reason:
                self.skip(f"file_{reason}")
                removed.append((section_path(sec), reason))
                continue
            kept.append(sec if sec.endswith("\n") else sec + "\n")
            size += n
        return kept

    def _render_commit(self, c: CommitRecord, names: Pseudonyms, removed: list[tuple[str, str]]) -> str | None:
        author = names(c.author_name, c.author_email)
        committer = names(c.committer_name, c.committer_email)
        is_merge = len(c.parents) > 1
        if is_merge and self.cfg.merges == "skip":
            self.skip("merge_commit")
            return None
        if self.cfg.bots == "skip" and is_bot(c.author_name, c.author_email):
            self.skip("bot_commit")
            return None
        if c.cut_bytes:  # a commit whose patch is bigger than the reader's input cap: not kept in part
            self.skip("commit_over_input_cap")
            return None
        had_diff = bool(c.diff.strip())
        mine: list[tuple[str, str]] = []
        sections = self._filter_diff(c, mine)
        if not sections and not is_merge and self.cfg.skip_empty:
            self.skip("empty_commit" if not had_diff else "only_removed_files")
            removed.extend((p, f"{r} (commit skipped)") for p, r in mine)
            return None
        if self.cfg.skip_formatting and not is_merge and formatting_only(sections):
            self.skip("formatting_only_commit")
            return None
        removed.extend(mine)
        message = scrub_message(c.message, names)
        head = f"commit {c.sha[:12]}\nAuthor: {author}\n"
        if committer != author:
            head += f"Committer: {committer}\n"
        if is_merge:
            head += f"Merge: {' '.join(p[:12] for p in c.parents)}\n"
        body = "\n".join("    " + line if line else "" for line in message.splitlines())
        return f"{head}\n{body}\n\n" + "".join(sections)

    def read_unit(self, unit: str, origin: str) -> Iterator[Document]:
        repo = Path(unit)
        if not is_git_repo(repo):
            self.stat_update("records")
            self.error("not_a_git_repository", unit, "commits needs a git repository", origin)
            return
        try:
            head_commit(repo)
            license_id = license_at(repo)
            repo_name = remote_name(repo)
            display = repo_name or repo.name.removesuffix(".git")
            roots = root_commits(repo)  # the history's identity under any name: decontamination matches it
            commits = iter_commits(
                repo, max_count=self.cfg.max_commits or None, max_commit_bytes=self.cfg.max_input_bytes
            )
            yield from self._runs(commits, display, repo_name, license_id, roots)
        except GitError as e:
            self.error("bad_git_repository", unit, str(e), origin)

    def _runs(
        self,
        commits: Iterable[CommitRecord],
        display: str,
        repo_name: str | None,
        license_id: str | None,
        roots: list[str] | None = None,
    ) -> Iterator[Document]:
        """Consecutive commits of one repository -> documents of at most max_doc_bytes each (git and tables)."""
        group: list[tuple[str, CommitRecord]] = []
        size = 0
        removed: list[tuple[str, str]] = []
        names = Pseudonyms("author")  # one numbering per repository: the same person keeps one alias
        for c in commits:
            self.stat_update("records")
            text = self._render_commit(c, names, removed)
            if text is None:
                continue
            if self._fixes is not None and self._fixes.fix_change(c.sha, text):
                self.skip("heldout_fix_commit")  # a held-out task's gold patch: never trained
                continue
            n = len(text.encode())
            if group and size + n > self.cfg.max_doc_bytes:
                yield self._document(group, display, repo_name, license_id, removed, roots)
                group, size, removed = [], 0, []
            group.append((text, c))
            size += n
        if group:
            yield self._document(group, display, repo_name, license_id, removed, roots)

    def _document(
        self,
        group: list[tuple[str, CommitRecord]],
        display: str,
        repo_name: str | None,
        license_id: str | None,
        removed: list[tuple[str, str]],
        roots: list[str] | None = None,
    ) -> Document:
        first, last = group[0][1], group[-1][1]
        doc_id = f"commit:{display}@{first.sha[:12]}..{last.sha[:12]}"
        bots = [(t, c) for t, c in group if is_bot(c.author_name, c.author_email)]
        cap = self.cfg.max_removed_paths
        return make_document(
            "".join(t for t, _ in group),
            doc_id,
            "commit",
            repo=repo_name,
            license=license_id,
            commits=[c.sha for _, c in group],
            first_timestamp=first.timestamp,
            last_timestamp=last.timestamp,
            bot_commits=len(bots),
            bot_bytes=sum(len(t.encode()) for t, _ in bots),
            removed_files=[{"path": p, "reason": r} for p, r in removed[:cap]],
            removed_files_total=len(removed),
            root_commits=roots or [],
        )
