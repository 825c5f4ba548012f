"""Commits from CommitPack-style tables: one row per changed file of a commit, grouped into per-repository runs.

Columns (bigcode/commitpack's card): ``commit``, ``old_file``, ``new_file``, ``old_contents``,
``new_contents``, ``subject``, ``message``, ``lang``, ``license``, ``repos`` (the repositories holding the
commit, comma-separated; the first is used). Other names: ``commits.columns.<field>=<column>``.

Each row becomes a git-style diff of its file (``difflib`` unified diff with ``diff --git`` headers,
``/dev/null`` for added/deleted files, ``rename from``/``rename to`` when ``old_file`` and ``new_file``
differ, a ``Binary files ... differ`` line for binary contents). Rows are grouped by repository across tasks
(:mod:`midtrain.sources.buckets`) and a commit's files are joined in path order. A row is what it holds: one
commit with its message and its old and new file. The tables carry no authors, dates or parents, and the
commits of a repository in a table are a sample, not a history: each commit is its own document
(``commit <sha>``, the message, the diff; no ``Author:`` line, timestamps null), through the git reader's
file filters, diff caps and skips (:class:`CommitReader`). People named in trailers (``Signed-off-by``)
become ``author_<n>`` within their commit.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass

from datatrove.data import Document

from midtrain.sources.buckets import BucketAssembler, TableRowPartitioner, grouped, grouping_stages, iter_bucket
from midtrain.sources.commits import CommitReader, CommitsConfig, formatting_only
from midtrain.sources.common import Pseudonyms, make_document
from midtrain.sources.git import CommitRecord
from midtrain.sources.privacy import scrub_message
from midtrain.sources.repo_tables import TableInputFields
from midtrain.sources.tables import license_expression, pick, schema_problem

ALIASES: dict[str, tuple[str, ...]] = {
    "repo": ("repos", "repo", "repo_name"),
    "commit": ("commit", "sha"),
    "old_file": ("old_file",),
    "new_file": ("new_file",),
    "old_contents": ("old_contents",),
    "new_contents": ("new_contents",),
    "message": ("message", "subject"),
    "license": ("license",),
}
REQUIRED = [("repo", "commit", "new_file"), ("repo", "commit", "old_file")]


@dataclass
class CommitsInputConfig(CommitsConfig, TableInputFields):
    """Commit documents from git histories or CommitPack-style tables."""

    def check(self) -> None:
        super().check()
        self.check_table_fields(tuple(ALIASES))


def file_diff(old_path: str, new_path: str, old: str, new: str) -> str:
    """A git-style unified diff of one file ('' when nothing changed; a pure rename is its header alone)."""
    renamed = old_path != new_path and bool(old) and bool(new)
    a = f"a/{old_path}" if old else "/dev/null"
    b = f"b/{new_path}" if new else "/dev/null"
    head = f"diff --git a/{old_path} b/{new_path}\n"
    if not old:
        head += "new file mode 100644\n"
    elif not new:
        head += "deleted file mode 100644\n"
    elif renamed:
        head += f"rename from {old_path}\nrename to {new_path}\n"
    if "\0" in old or "\0" in new:
        return head + f"Binary files {a} and {b} differ\n"
    lines = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b, n=3):
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return head + "".join(lines) if lines or renamed else ""


class CommitRowPartitioner(TableRowPartitioner):
    """Partition stage: each changed-file row -> its diff, tagged with the repository and commit."""

    source = "commits"
    config_class = CommitsInputConfig
    cfg: CommitsInputConfig

    def schema_problem(self, row: dict) -> str | None:
        return schema_problem("commits", row, REQUIRED, self.cfg.columns, ALIASES)

    def row_documents(self, row: dict, where: str) -> list[Document]:
        get = lambda f: pick(row, f, self.cfg.columns, ALIASES[f])  # noqa: E731
        repos, sha = get("repo"), get("commit")
        if not repos or not sha:
            self.row_error("bad_row", where, "a commit row needs a repository and a commit hash")
            return []
        repo = str(repos).split(",")[0].strip()
        old_path, new_path = get("old_file") or get("new_file"), get("new_file") or get("old_file")
        if not isinstance(old_path, str) or not isinstance(new_path, str):
            self.row_error("bad_row", where, "a commit row needs old_file/new_file")
            return []
        if any(ord(c) < 32 or ord(c) == 127 for c in old_path + new_path):
            self.skip("path_control_chars")  # would break the one-line diff --git header
            return []
        diff = file_diff(old_path, new_path, get("old_contents") or "", get("new_contents") or "")
        return [
            Document(
                text=diff,
                id=f"{repo}:{sha}:{new_path}",
                metadata={
                    "group": repo,
                    "commit": str(sha),
                    "path": new_path,
                    "message": str(get("message") or ""),
                    "license": license_expression(get("license")),
                },
            )
        ]


class CommitAssembler(BucketAssembler, CommitReader):
    """Assemble stage: a bucket's rows -> per repository, one document per commit (in hash order, for a stable
    output: the order says nothing about time)."""

    name = "🕑 commits from table rows"
    config_class = CommitsInputConfig
    cfg: CommitsInputConfig

    def read_unit(self, unit: str, origin: str) -> Iterator[Document]:
        for repo, rows in grouped(iter_bucket(self.rows_dir, unit)):
            yield from self._repository(repo, rows)

    def _repository(self, repo: str, rows: list[dict]) -> Iterator[Document]:
        by_commit: dict[str, list[dict]] = {}
        for r in rows:
            by_commit.setdefault(r["metadata"]["commit"], []).append(r)
        for sha in sorted(by_commit):
            self.stat_update("records")
            files = sorted(by_commit[sha], key=lambda r: (r["metadata"]["path"], r["text"]))
            licenses = sorted({r["metadata"]["license"] for r in files if r["metadata"].get("license")})
            record = CommitRecord(
                sha=sha,
                parents=[],
                author_name="",
                author_email="",
                committer_name="",
                committer_email="",
                timestamp=0,
                message=files[0]["metadata"]["message"].strip(),
                diff="".join(r["text"] for r in files).encode("utf-8", "surrogatepass"),
            )
            doc = self._table_commit(record, repo, licenses[0] if len(licenses) == 1 else None)
            if doc is not None:
                yield doc

    def _table_commit(self, c: CommitRecord, repo: str, license_id: str | None) -> Document | None:
        """One table commit as the row holds it: header, message, diff; the git reader's filters and skips."""
        removed: list[tuple[str, str]] = []
        sections = self._filter_diff(c, removed)
        if not sections and self.cfg.skip_empty:
            self.skip("empty_commit" if not c.diff.strip() else "only_removed_files")
            return None
        if self.cfg.skip_formatting and formatting_only(sections):
            self.skip("formatting_only_commit")
            return None
        names = Pseudonyms("author")  # people named in the message's trailers, numbered within this commit
        message = scrub_message(c.message, names)
        body = "\n".join("    " + line if line else "" for line in message.splitlines())
        text = f"commit {c.sha[:12]}\n\n{body}\n\n" + "".join(sections)
        cap = self.cfg.max_removed_paths
        return make_document(
            text,
            f"commit:{repo}@{c.sha[:12]}",
            "commit",
            repo=repo,
            license=license_id,
            commits=[c.sha],
            first_timestamp=None,
            last_timestamp=None,
            bot_commits=0,
            bot_bytes=0,
            removed_files=[{"path": p, "reason": r} for p, r in removed[:cap]],
            removed_files_total=len(removed),
            root_commits=[],
        )


def commit_table_stages(
    inputs: list[str],
    cfg: CommitsInputConfig,
    rows_dir: str,
    buckets: int,
    raw_dir: str,
    report_dir: str,
    exclusion_dir: str | None,
) -> tuple[list, list]:
    """(partition pipeline, assemble pipeline) for `midtrain prep commits` on table inputs."""
    return grouping_stages(
        CommitRowPartitioner(inputs, cfg, buckets=buckets, report_dir=report_dir),
        CommitAssembler(rows_dir, buckets, cfg, report_dir=report_dir, exclusion_dir=exclusion_dir),
        rows_dir,
        raw_dir,
    )
