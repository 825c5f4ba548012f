"""Commits from CommitPack-style tables: one row per changed file of a commit, grouped into per-repository runs.

Columns (bigcode/commitpack's card): ``commit``, ``old_file``, ``new_file``, ``old_contents``,
``new_contents``, ``subject``, ``message``, ``lang``, ``license``, ``repos`` (the repositories holding the
commit, comma-separated; the first is used). Other names: ``commits.columns.<field>=<column>``.

Each row becomes a git-style diff of its file (``difflib`` unified diff with ``diff --git`` headers,
``/dev/null`` for added/deleted files, a ``Binary files ... differ`` line for binary contents). Rows are
grouped by repository across tasks (:mod:`midtrain.sources.buckets`); a commit's files are joined in path
order, and the commits are rendered and grouped into runs under ``max_doc_bytes`` by the git reader's own
code (:class:`CommitReader`). The tables carry no dates or authors: commits are ordered by hash, and every
author is ``author_1``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterator

from datatrove.data import Document

from midtrain.sources.buckets import BucketAssembler, TableRowPartitioner, grouped, grouping_stages, iter_bucket
from midtrain.sources.commits import CommitReader, CommitsConfig
from midtrain.sources.git import CommitRecord
from midtrain.sources.repo_tables import TableInputFields
from midtrain.sources.tables import first_license, pick

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


@dataclass
class CommitsInputConfig(CommitsConfig, TableInputFields):
    """Commit documents from git histories or CommitPack-style tables."""

    def check(self) -> None:
        super().check()
        self.check_table_fields(tuple(ALIASES))


def file_diff(old_path: str, new_path: str, old: str, new: str) -> str:
    """A git-style unified diff of one file ('' when nothing changed)."""
    a = f"a/{old_path}" if old else "/dev/null"
    b = f"b/{new_path}" if new else "/dev/null"
    head = f"diff --git a/{old_path} b/{new_path}\n"
    if not old:
        head += "new file mode 100644\n"
    elif not new:
        head += "deleted file mode 100644\n"
    if "\0" in old or "\0" in new:
        return head + f"Binary files {a} and {b} differ\n"
    lines = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b, n=3):
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return head + "".join(lines) if lines else ""


class CommitRowPartitioner(TableRowPartitioner):
    """Partition stage: each changed-file row -> its diff, tagged with the repository and commit."""

    source = "commits"
    config_class = CommitsInputConfig
    cfg: CommitsInputConfig

    def row_documents(self, row: dict, where: str) -> list[Document]:
        get = lambda f: pick(row, f, self.cfg.columns, ALIASES[f])  # noqa: E731
        repos, sha = get("repo"), get("commit")
        if not repos or not sha:
            self.error("bad_row", where, "a commit row needs a repository and a commit hash")
            return []
        repo = str(repos).split(",")[0].strip()
        old_path, new_path = get("old_file") or get("new_file"), get("new_file") or get("old_file")
        if not isinstance(old_path, str) or not isinstance(new_path, str):
            self.error("bad_row", where, "a commit row needs old_file/new_file")
            return []
        diff = file_diff(old_path, new_path, get("old_contents") or "", get("new_contents") or "")
        return [Document(text=diff, id=f"{repo}:{sha}:{new_path}",
                         metadata={"group": repo, "commit": str(sha), "path": new_path,
                                   "message": str(get("message") or ""),
                                   "license": first_license(get("license"))})]


class CommitAssembler(BucketAssembler, CommitReader):
    """Assemble stage: a bucket's rows -> per repository, commits in hash order -> runs (git reader's code)."""

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
        licenses = sorted({r["metadata"]["license"] for r in rows if r["metadata"].get("license")})
        license_id = licenses[0] if len(licenses) == 1 else None
        records = []
        for sha in sorted(by_commit):
            files = sorted(by_commit[sha], key=lambda r: (r["metadata"]["path"], r["text"]))
            records.append(CommitRecord(
                sha=sha, parents=[], author_name="", author_email="", committer_name="", committer_email="",
                timestamp=0, message=files[0]["metadata"]["message"].strip(),
                diff="".join(r["text"] for r in files).encode("utf-8", "surrogatepass")))
        yield from self._runs(records, repo, repo, license_id)


def commit_table_stages(inputs: list[str], cfg: CommitsInputConfig, rows_dir: str, buckets: int, raw_dir: str,
                        report_dir: str, exclusion_dir: str | None) -> tuple[list, list]:
    """(partition pipeline, assemble pipeline) for `midtrain prep commits` on table inputs."""
    return grouping_stages(CommitRowPartitioner(inputs, cfg, buckets=buckets, report_dir=report_dir),
                           CommitAssembler(rows_dir, buckets, cfg, report_dir=report_dir, exclusion_dir=exclusion_dir),
                           rows_dir, raw_dir)
