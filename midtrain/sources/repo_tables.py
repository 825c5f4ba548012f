"""Repositories from public file tables: rows of files grouped back into repository documents.

Two table layouts are read:

- *file rows*, one row per file, rows of a repository scattered over the table: The Stack v1
  (``content``, ``max_stars_repo_name``, ``max_stars_repo_path``, ``max_stars_repo_licenses``,
  ``max_stars_repo_head_hexsha``, ``max_stars_count``), codeparrot/github-code (``code``, ``repo_name``,
  ``path``, ``license``);
- *repository rows*, one row per repository with a list of its files: ``repo`` / ``repo_name`` and
  ``files`` = ``[{path, content}]`` (plus optional ``license``, ``commit``).

Rows are grouped by repository across tasks (:mod:`midtrain.sources.buckets`), then each repository goes
through the git reader's own file filters and rendering (:class:`RepoReader`), so a repository gives the same
document from a table as from its git tree. Differences a table cannot avoid: a table has no symlinks or
submodules, and its license column is used when the repository has no LICENSE file to detect one from.
Other column names: ``repos.columns.<field>=<column>`` for field in repo, path, content, license, commit, files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Literal

from datatrove.data import Document

from midtrain.config import require
from midtrain.sources.buckets import BucketAssembler, TableRowPartitioner, grouped, grouping_stages, iter_bucket
from midtrain.sources.repos import RepoReader, ReposConfig
from midtrain.sources.tables import first_license, json_field, pick

ALIASES: dict[str, tuple[str, ...]] = {
    "repo": ("max_stars_repo_name", "repo_name", "repo", "repository"),
    "path": ("max_stars_repo_path", "path", "file_path", "filename"),
    "content": ("content", "code", "text"),
    "license": ("max_stars_repo_licenses", "licenses", "license"),
    "commit": ("max_stars_repo_head_hexsha", "commit", "revision"),
    "files": ("files",),
}


@dataclass
class TableInputFields:
    """Fields every source config gets for table inputs (mixed into each source's config)."""

    input_format: Literal["auto", "files", "table"] = "auto"  # auto: table when every input is a URL or table file
    columns: dict[str, str] = field(default_factory=dict)  # reader field -> the table's column name
    buckets: int = 0  # grouping buckets across tasks; 0 = as many as --tasks

    def check_table_fields(self, known: tuple[str, ...]) -> None:
        require(self.buckets >= 0, "buckets", "must be >= 0 (0 = the number of tasks)")
        for name in self.columns:
            require(name in known, f"columns.{name}", f"unknown reader field (valid: {', '.join(known)})")


@dataclass
class ReposInputConfig(ReposConfig, TableInputFields):
    """Repository documents from git trees, directories or file tables."""

    def check(self) -> None:
        super().check()
        self.check_table_fields(tuple(ALIASES))


class RepoRowPartitioner(TableRowPartitioner):
    """Partition stage: each file row (or each file of a repository row) -> a row tagged with its repository."""

    source = "repos"
    config_class = ReposInputConfig
    cfg: ReposInputConfig

    def row_documents(self, row: dict, where: str) -> list[Document]:
        cols = self.cfg.columns
        repo = pick(row, "repo", cols, ALIASES["repo"])
        if not repo:
            self.error("no_repository", where, "the row has no repository name column")
            return []
        meta = {"group": str(repo), "license": first_license(pick(row, "license", cols, ALIASES["license"])),
                "commit": pick(row, "commit", cols, ALIASES["commit"])}
        files = json_field(pick(row, "files", cols, ALIASES["files"]))
        if files is not None:
            if not isinstance(files, list):
                raise ValueError("'files' is not a list")
            # a repository row: one partition row per file, all to the repository's bucket
            docs = []
            for f in files:
                path = pick(f, "path", cols, ALIASES["path"]) if isinstance(f, dict) else None
                content = pick(f, "content", cols, ALIASES["content"]) if isinstance(f, dict) else None
                if not isinstance(path, str) or not isinstance(content, str):
                    self.error("bad_row", where, "a file of a repository row needs a path and a text content")
                    continue
                docs.append(Document(text=content, id=f"{repo}:{path}", metadata=dict(meta, path=path)))
            return docs
        path = pick(row, "path", cols, ALIASES["path"])
        content = pick(row, "content", cols, ALIASES["content"])
        if not isinstance(path, str) or not isinstance(content, str):
            self.error("bad_row", where, "a file row needs a path and a text content column")
            return []
        return [Document(text=content, id=f"{repo}:{path}", metadata=dict(meta, path=path))]


class RepoAssembler(BucketAssembler, RepoReader):
    """Assemble stage: each bucket's rows -> one repository at a time, through the git reader's filters and
    rendering. Counts ``records`` (repositories) and ``documents`` like the git reader."""

    name = "📦 repositories from table rows"
    config_class = ReposInputConfig
    cfg: ReposInputConfig

    def read_unit(self, unit: str, origin: str) -> Iterator[Document]:
        for repo, rows in grouped(iter_bucket(self.rows_dir, unit)):
            self.stat_update("records")
            yield from self._repository(repo, rows)

    def _repository(self, repo: str, rows: list[dict]) -> Iterator[Document]:
        self._removed, self._removed_total = [], 0  # skipped paths of this repository (RepoReader.skip_path)
        # the same path twice (a table with duplicated rows): keep one, chosen by content, not by arrival order
        wanted: dict[str, bytes] = {}
        for r in sorted(rows, key=lambda r: (r["metadata"]["path"], r["text"])):
            path, text = r["metadata"]["path"], r["text"]
            if path in wanted:
                self.skip("duplicate_path")
                continue
            data = text.encode("utf-8", "surrogatepass")
            reason = self._skip_reason_path(path, len(data))
            if reason:
                self.skip_path(path, reason)
                continue
            wanted[path] = data
        # the git reader's caps (files and bytes per repository), in the same path order
        kept = self._capped(sorted(wanted), [len(wanted[p]) for p in sorted(wanted)], sorted(wanted))
        files: dict[str, str] = {}
        for path in kept:
            reason, text = self._skip_reason_content(path, wanted[path])
            if reason:
                self.skip_path(path, reason)
                continue
            files[path] = text
        if not files:
            self.error("no_usable_files", repo, "every file was skipped")
            return
        commits = sorted({r["metadata"].get("commit") for r in rows if r["metadata"].get("commit")})
        licenses = sorted({r["metadata"].get("license") for r in rows if r["metadata"].get("license")})
        for doc in self._render(Path(repo), files, repo, commits[0] if len(commits) == 1 else None):
            if doc.metadata.get("license") is None and len(licenses) == 1:
                doc.metadata["license"] = licenses[0]  # no LICENSE file: the table's license column
            yield doc


def repo_table_stages(inputs: list[str], cfg: ReposInputConfig, rows_dir: str, buckets: int, raw_dir: str,
                      report_dir: str, exclusion_dir: str | None) -> tuple[list, list]:
    """(partition pipeline, assemble pipeline) for `midtrain prep repos` on table inputs."""
    return grouping_stages(RepoRowPartitioner(inputs, cfg, buckets=buckets, report_dir=report_dir),
                           RepoAssembler(rows_dir, buckets, cfg, report_dir=report_dir, exclusion_dir=exclusion_dir),
                           rows_dir, raw_dir)

