"""Commit histories -> documents of consecutive commits (message + unified diff), oldest first.

Commits are taken in chronological order (``git log --reverse --date-order``) and grouped into runs whose
text stays under ``max_doc_bytes``. Authors and committers become ``author_<n>`` (numbered per repository,
also where their names or emails appear in messages, e.g. ``Signed-off-by``). Explicit policies:
merge commits are skipped (their changes are in the merged commits) or kept as a message-only entry;
binary file changes become a one-line marker; a diff over ``max_diff_bytes`` keeps its per-file headers
and hunks up to the cap, then says how much was cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

from datatrove.data import Document

from midtrain.config import require
from midtrain.sources.common import Pseudonyms, ReaderConfig, SourceReader, expand_inputs, make_document
from midtrain.sources.git import CommitRecord, GitError, head_commit, is_git_repo, iter_commits, remote_name, \
    root_commits
from midtrain.sources.licenses import detect_spdx, is_license_file

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+")
_TRAILER = re.compile(r"^((?:signed-off-by|co-authored-by|reviewed-by|acked-by|tested-by|reported-by|"
                      r"suggested-by|helped-by|cc)\s*:\s*)(.*)$", re.IGNORECASE | re.MULTILINE)


@dataclass
class CommitsConfig(ReaderConfig):
    """Commit-history documents."""

    max_doc_bytes: int = 1_000_000
    max_diff_bytes: int = 200_000  # per commit; the rest of a huge diff is cut with a marker
    merges: Literal["skip", "message"] = "skip"
    max_commits: int = 0  # per repository, newest history kept; 0 = all
    skip_empty: bool = True  # commits with no diff (e.g. --allow-empty) are skipped

    def check(self) -> None:
        super().check()
        require(self.max_diff_bytes >= 1000, "max_diff_bytes", "must be at least 1000")
        require(self.max_commits >= 0, "max_commits", "must be >= 0")


def _clean_diff(diff: str, max_bytes: int) -> tuple[str, dict[str, int]]:
    """Binary changes -> markers; cap the size at a line boundary with an explicit marker."""
    counts = {"binary_files": 0, "truncated": 0}
    out = []
    size = 0
    lines = diff.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("Binary files ") or line.startswith("GIT binary patch"):
            counts["binary_files"] += 1
            line = f"[binary file changed: {line.strip()}]\n"
        size += len(line.encode())
        if size > max_bytes:
            rest = sum(len(x.encode()) for x in lines[i:])
            out.append(f"[diff truncated: {len(lines) - i} more lines, {rest} bytes]\n")
            counts["truncated"] = 1
            break
        out.append(line)
    return "".join(out), counts


class CommitReader(SourceReader):
    """datatrove reader: each input path is one git repository; its history becomes documents."""

    name = "🕑 commits"
    source = "commits"

    config_class = CommitsConfig
    cfg: CommitsConfig

    def units(self) -> list[tuple[str, str]]:
        return [(str(p), str(p)) for p in sorted(expand_inputs(self.inputs), key=str)]

    def _license(self, repo: Path) -> str | None:
        from midtrain.sources.git import list_tree, read_blobs

        entries = [e for e in list_tree(repo) if "/" not in e.path and is_license_file(e.path) and e.mode != "120000"]
        for _, data in read_blobs(repo, [e.sha for e in entries]):
            spdx = detect_spdx(data.decode("utf-8", "replace"))
            if spdx:
                return spdx
        return None

    def _render_commit(self, c: CommitRecord, names: Pseudonyms) -> str | None:
        author = names(c.author_name, c.author_email)
        committer = names(c.committer_name, c.committer_email)
        is_merge = len(c.parents) > 1
        if is_merge and self.cfg.merges == "skip":
            self.skip("merge_commit")
            return None
        diff_text = c.diff.decode("utf-8", "replace")
        if "\ufffd" in diff_text and b"\xef\xbf\xbd" not in c.diff:
            self.skip("invalid_utf8_replaced")  # text kept, undecodable bytes shown as U+FFFD
        diff_text, counts = _clean_diff(diff_text, self.cfg.max_diff_bytes)
        if counts["binary_files"]:
            self.skip("binary_file_diff", counts["binary_files"])
        if counts["truncated"]:
            self.skip("huge_diff_truncated")
        if not diff_text.strip() and not is_merge and self.cfg.skip_empty:
            self.skip("empty_commit")
            return None
        message = _TRAILER.sub(lambda m: m.group(1) + names(*_split_ident(m.group(2))), c.message)
        message = names.scrub(message)
        message = _EMAIL.sub("<EMAIL>", message)
        head = f"commit {c.sha[:12]}\nAuthor: {author}\n"
        if committer != author:
            head += f"Committer: {committer}\n"
        if is_merge:
            head += f"Merge: {' '.join(p[:12] for p in c.parents)}\n"
        body = "\n".join("    " + line if line else "" for line in message.splitlines())
        text = f"{head}\n{body}\n\n"
        if diff_text.strip():
            text += diff_text if diff_text.endswith("\n") else diff_text + "\n"
        return text

    def read_unit(self, unit: str, origin: str) -> Iterator[Document]:
        repo = Path(unit)
        if not is_git_repo(repo):
            self.stat_update("records")
            self.error("not_a_git_repository", unit, "commits needs a git repository", origin)
            return
        try:
            head_commit(repo)
            license_id = self._license(repo)
            repo_name = remote_name(repo)
            display = repo_name or repo.name.removesuffix(".git")
            roots = root_commits(repo)  # the history's identity under any name: decontamination matches it
            commits = iter_commits(repo, max_count=self.cfg.max_commits or None)
            group: list[tuple[str, CommitRecord]] = []
            size = 0
            names = Pseudonyms("author")  # one numbering per repository: the same person keeps one alias
            for c in commits:
                self.stat_update("records")
                text = self._render_commit(c, names)
                if text is None:
                    continue
                n = len(text.encode())
                if group and size + n > self.cfg.max_doc_bytes:
                    yield self._document(group, display, repo_name, license_id, roots)
                    group, size = [], 0
                group.append((text, c))
                size += n
            if group:
                yield self._document(group, display, repo_name, license_id, roots)
        except GitError as e:
            self.error("bad_git_repository", unit, str(e), origin)

    def _document(self, group: list[tuple[str, CommitRecord]], display: str, repo_name: str | None,
                  license_id: str | None, roots: list[str] | None = None) -> Document:
        first, last = group[0][1], group[-1][1]
        doc_id = f"commit:{display}@{first.sha[:12]}..{last.sha[:12]}"
        return make_document("".join(t for t, _ in group), doc_id, "commit", repo=repo_name, license=license_id,
                             commits=[c.sha for _, c in group], first_timestamp=first.timestamp,
                             last_timestamp=last.timestamp, root_commits=roots or [])


def _split_ident(text: str) -> tuple[str, str]:
    """'Jane Doe <jane@x.org>' -> ('Jane Doe', 'jane@x.org')."""
    m = re.match(r"\s*(.*?)\s*<([^>]*)>\s*$", text)
    return (m.group(1), m.group(2)) if m else (text.strip(), "")
