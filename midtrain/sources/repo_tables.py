"""Repositories from public file tables: rows of files grouped back into repository documents.

Two table layouts are read:

- *file rows*, one row per file, rows of a repository scattered over the table: The Stack v1
  (``content``, ``max_stars_repo_name``, ``max_stars_repo_path``, ``max_stars_repo_licenses``,
  ``max_stars_repo_head_hexsha``, ``max_stars_count``), bigcode/the-stack-smol (``content``,
  ``repository_name``, ``path``, ``licenses``), codeparrot/github-code (``code``, ``repo_name``, ``path``,
  ``license`` as GitHub's license keys);
- *repository rows*, one row per repository with a list of its files: ``repo`` / ``repo_name`` and
  ``files`` = ``[{path, content}]`` (plus optional ``license``, ``commit``); The Stack v2's repository rows
  (``repo_name``, ``revision_id``, ``gha_license_id``, ``files[]`` with ``path``, ``detected_licenses`` and
  the ``content`` a user downloads for each blob; its repository-absolute paths lose their leading ``/``).

Licenses: every license a row names counts (a list means the code is under all of them, ``A AND B``; The
Stack v2's per-file ``detected_licenses`` add up to the repository's), GitHub's keys become SPDX ids
(:func:`midtrain.sources.tables.license_expression`). A path with a newline or another control character is
skipped (``skip/path_control_chars``), as the git reader does: it would break the one-line file header.

Rows are grouped by repository across tasks (:mod:`midtrain.sources.buckets`), then each repository goes
through the git reader's own file filters and rendering (:class:`RepoReader`), so a repository gives the same
document from a table as from its git tree. Differences a table cannot avoid: a table has no symlinks or
submodules, and its license column is used when the repository has no LICENSE file to detect one from.
Other column names: ``repos.columns.<field>=<column>`` for field in repo, path, content, license, commit, files.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from datatrove.data import Document

from midtrain.config import require
from midtrain.sources.buckets import BucketAssembler, TableRowPartitioner, grouped, grouping_stages, iter_bucket
from midtrain.sources.licenses import spdx_id
from midtrain.sources.repos import RepoReader, ReposConfig, _control_chars
from midtrain.sources.tables import json_field, license_expression, pick, schema_problem

ALIASES: dict[str, tuple[str, ...]] = {
    "repo": ("max_stars_repo_name", "repo_name", "repository_name", "repo", "repository"),
    "path": ("max_stars_repo_path", "path", "file_path", "filename"),
    "content": ("content", "code", "text"),
    "license": ("max_stars_repo_licenses", "licenses", "license", "gha_license_id"),
    "file_licenses": ("detected_licenses",),
    "commit": ("max_stars_repo_head_hexsha", "commit", "revision", "revision_id"),
    "files": ("files",),
}
# the fields one row must provide: a repository with its file list, or a repository, a path and a content
REQUIRED = [("repo", "files"), ("repo", "path", "content")]


def _ids(value) -> list[str]:
    """Every license id a cell names (GitHub's keys as SPDX ids), sorted."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return sorted({i for v in values if v is not None for i in [spdx_id(str(v))] if i})


@dataclass
class TableInputFields:
    """Fields every source config gets for table inputs (mixed into each source's config)."""

    input_format: Literal["auto", "files", "table"] = "auto"  # auto: table when every input is a URL or table file
    columns: dict[str, str] = field(default_factory=dict)  # reader field -> the table's column name
    buckets: int = 0  # grouping buckets across tasks; 0 = as many as --tasks
    # a Hugging Face dataset folder or hf:// URL: which config and split of its card, at which revision
    dataset_config: str = ""  # "" = the card's default config
    split: str = ""  # "" = every split of the config
    revision: str = ""  # hf:// URLs only: a branch, tag or commit

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

    def schema_problem(self, row: dict) -> str | None:
        return schema_problem("repos", row, REQUIRED, self.cfg.columns, ALIASES)

    def _file(self, repo: str, path, content, meta: dict, where: str, what: str) -> list[Document]:
        if not isinstance(path, str) or not isinstance(content, str):
            self.row_error("bad_row", where, f"{what} needs a path and a text content")
            return []
        if _control_chars(path):  # would break the one-line <|file_sep|> header (the git reader skips it too)
            self.skip("path_control_chars")
            return []
        path = path.lstrip("/")  # The Stack v2 gives repository-absolute paths ("/src/app.py")
        return [Document(text=content, id=f"{repo}:{path}", metadata=dict(meta, path=path))]

    def row_documents(self, row: dict, where: str) -> list[Document]:
        cols = self.cfg.columns
        repo = pick(row, "repo", cols, ALIASES["repo"])
        if not repo:
            self.row_error("no_repository", where, "the row has no repository name")
            return []
        repo = str(repo)
        licenses = _ids(pick(row, "license", cols, ALIASES["license"]))
        meta = {"group": repo, "licenses": licenses, "commit": pick(row, "commit", cols, ALIASES["commit"])}
        files = json_field(pick(row, "files", cols, ALIASES["files"]))
        if files is not None:
            if not isinstance(files, list):
                raise ValueError("'files' is not a list")
            # a repository row: one partition row per file, all to the repository's bucket
            docs = []
            for f in files:
                if not isinstance(f, dict):
                    self.row_error("bad_row", where, "a file of a repository row is not an object")
                    continue
                file_meta = dict(
                    meta,
                    licenses=sorted(
                        set(licenses) | set(_ids(pick(f, "file_licenses", cols, ALIASES["file_licenses"])))
                    ),
                )
                docs += self._file(
                    repo,
                    pick(f, "path", cols, ALIASES["path"]),
                    pick(f, "content", cols, ALIASES["content"]),
                    file_meta,
                    where,
                    "a file of a repository row",
                )
            return docs
        return self._file(
            repo,
            pick(row, "path", cols, ALIASES["path"]),
            pick(row, "content", cols, ALIASES["content"]),
            meta,
            where,
            "a file row",
        )


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
            assert text is not None  # no skip reason: the decoded text
            files[path] = text
        if not files:
            self.error("no_usable_files", repo, "every file was skipped")
            return
        commits = sorted({r["metadata"].get("commit") for r in rows if r["metadata"].get("commit")})
        # every license any row names (each file's, the repository's): the code is under all of them
        table_license = license_expression(sorted({i for r in rows for i in r["metadata"].get("licenses") or []}))
        for doc in self._render(Path(repo), files, repo, commits[0] if len(commits) == 1 else None):
            if doc.metadata.get("license") is None:
                doc.metadata["license"] = table_license  # no LICENSE file: the table's license columns
            yield doc


def repo_table_stages(
    inputs: list[str],
    cfg: ReposInputConfig,
    rows_dir: str,
    buckets: int,
    raw_dir: str,
    report_dir: str,
    exclusion_dir: str | None,
) -> tuple[list, list]:
    """(partition pipeline, assemble pipeline) for `midtrain prep repos` on table inputs."""
    return grouping_stages(
        RepoRowPartitioner(inputs, cfg, buckets=buckets, report_dir=report_dir),
        RepoAssembler(rows_dir, buckets, cfg, report_dir=report_dir, exclusion_dir=exclusion_dir),
        rows_dir,
        raw_dir,
    )
