"""Repositories -> one document each: docs first, then code files in import-dependency order.

Input: git repositories (working trees or bare mirrors; the tree at HEAD is read) or plain directories.
Each file goes under a path header. Binary, vendored, generated, minified and lock files, files over
``max_file_bytes`` and symlinks that leave the repository are skipped and counted (``skip/<reason>``).
A repository larger than ``max_doc_bytes`` is split into parts at file boundaries. Metadata: the license's
SPDX id (LICENSE/COPYING at the root), languages by bytes, file count, commit sha, and ``file_offsets``
(character offset of each file header) so a packer can split at file boundaries too.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datatrove.data import Document

from midtrain.config import require
from midtrain.sources.common import ReaderConfig, SourceReader, decode_utf8, looks_binary, make_document
from midtrain.sources.filters import path_skip_reason, text_skip_reason
from midtrain.sources.git import GitError, head_commit, is_git_repo, list_tree, read_blobs, remote_name, root_commits
from midtrain.sources.licenses import tree_license
from midtrain.sources.ordering import dependency_order

LANGUAGES = {
    ".py": "Python",
    ".pyi": "Python",
    ".js": "JavaScript",
    ".jsx": "JavaScript",
    ".mjs": "JavaScript",
    ".cjs": "JavaScript",
    ".ts": "TypeScript",
    ".tsx": "TypeScript",
    ".java": "Java",
    ".kt": "Kotlin",
    ".go": "Go",
    ".rs": "Rust",
    ".c": "C",
    ".h": "C",
    ".cc": "C++",
    ".cpp": "C++",
    ".cxx": "C++",
    ".hpp": "C++",
    ".hh": "C++",
    ".cs": "C#",
    ".rb": "Ruby",
    ".php": "PHP",
    ".swift": "Swift",
    ".scala": "Scala",
    ".sh": "Shell",
    ".bash": "Shell",
    ".lua": "Lua",
    ".r": "R",
    ".jl": "Julia",
    ".m": "Objective-C",
    ".sql": "SQL",
    ".html": "HTML",
    ".css": "CSS",
    ".scss": "CSS",
    ".vue": "Vue",
    ".md": "Markdown",
    ".rst": "reStructuredText",
    ".toml": "TOML",
    ".yaml": "YAML",
    ".yml": "YAML",
    ".json": "JSON",
    ".cmake": "CMake",
    ".dart": "Dart",
    ".ex": "Elixir",
    ".hs": "Haskell",
    ".ml": "OCaml",
}
SPECIAL_NAMES = {"Makefile": "Makefile", "CMakeLists.txt": "CMake", "Dockerfile": "Dockerfile"}
DOC_EXT = (".md", ".rst", ".txt", ".adoc", ".markdown")


@dataclass
class ReposConfig(ReaderConfig):
    """Repository documents: file filters and the header format."""

    max_file_bytes: int = 500_000  # larger files are skipped (usually data, not code)
    max_line_chars: int = 1000  # a file whose longest line is longer and averages > 200 chars is minified
    repo_header: str = "<|repo_name|>{repo}\n"  # Qwen2.5-Coder repo-level format
    file_header: str = "<|file_sep|>{path}\n"
    skip_vendored: bool = True
    skip_generated: bool = True
    extra_skip_dirs: list[str] = field(default_factory=list)
    max_removed_paths: int = 200  # per repository: skipped file paths recorded with their reason
    max_files: int = 50_000  # per repository; files past this (in path order) and past max_input_bytes are cut
    # code files in import-dependency order (a module after what it imports), or plainly by path (an ablation)
    file_order: str = "dependency"

    def check(self) -> None:
        super().check()
        require(self.max_file_bytes > 0, "max_file_bytes", "must be positive")
        require("{path}" in self.file_header, "file_header", "must contain {path}")
        require(self.file_order in ("dependency", "path"), "file_order", "must be 'dependency' or 'path'")


# root files in which a project states its home (packaging metadata, README badges)
MANIFEST_NAMES = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "package.json",
    "Cargo.toml",
    "go.mod",
    "pom.xml",
    "composer.json",
)


def root_manifests(files: dict[str, str], max_chars: int = 20_000) -> dict[str, str]:
    """The repository's root manifests and README head ({path: text}, each cut at max_chars)."""
    out = {}
    for path, text in files.items():
        if "/" in path:
            continue
        if path in MANIFEST_NAMES or path.endswith(".gemspec"):
            out[path] = text[:max_chars]
        elif path.lower().split(".")[0] == "readme":
            out[path] = "\n".join(text.splitlines()[:30])  # the README head identity reads (README_LINES)
    return dict(sorted(out.items()))


def is_doc_path(path: str) -> bool:
    """README/docs files, which go first in the document."""
    name = posixpath.basename(path).lower()
    top = path.split("/")[0].lower()
    return name.startswith("readme") or (top in ("docs", "doc") and name.endswith(DOC_EXT))


def _doc_rank(path: str) -> tuple:
    # root README first, then other READMEs, then docs/ by path
    name = posixpath.basename(path).lower()
    return (0 if ("/" not in path and name.startswith("readme")) else 1 if name.startswith("readme") else 2, path)


def _utf8_path(path: str) -> bool:
    try:
        path.encode("utf-8")
        return True
    except UnicodeEncodeError:  # undecodable bytes in a file name (surrogate-escaped)
        return False


def _control_chars(path: str) -> bool:
    """A newline or other control character in a path would break its one-line ``<|file_sep|>path`` header."""
    return any(ord(c) < 32 or ord(c) == 127 for c in path)


def language_of(path: str) -> str | None:
    name = posixpath.basename(path)
    if name in SPECIAL_NAMES:
        return SPECIAL_NAMES[name]
    return LANGUAGES.get(posixpath.splitext(name)[1].lower())


class RepoReader(SourceReader):
    """datatrove reader: each input path is one repository (git or plain directory)."""

    name = "📦 repositories"
    source = "repos"

    config_class: type[ReposConfig] = ReposConfig
    cfg: ReposConfig

    # -- file filter ------------------------------------------------------------------------------
    def _skip_reason_path(self, path: str, size: int) -> str | None:
        return path_skip_reason(
            path,
            size,
            self.cfg.max_file_bytes,
            self.cfg.skip_vendored,
            self.cfg.skip_generated,
            self.cfg.extra_skip_dirs,
        )

    def _skip_reason_content(self, path: str, data: bytes) -> tuple[str | None, str | None]:
        if looks_binary(data):
            return "binary", None
        text = decode_utf8(data)
        if text is None:
            return "not_utf8", None
        reason = text_skip_reason(path, text, self.cfg.max_line_chars, self.cfg.skip_generated)
        return (reason, None) if reason else (None, text)

    def _capped(self, items: list, sizes: list[int], paths: list[str]) -> list:
        """The first items (in path order) within max_files and max_input_bytes; the rest counted as cut."""
        total = 0
        for i, size in enumerate(sizes):
            total += size
            if i >= self.cfg.max_files or total > self.cfg.max_input_bytes:
                reason = "too_many_files" if i >= self.cfg.max_files else "repository_bytes_cap"
                for path in paths[i:]:
                    self.skip_path(path, reason)
                return items[:i]
        return items

    def skip_path(self, path: str, reason: str) -> None:
        """A file left out: counted, and its path kept (bounded) for the document's ``removed_files``."""
        self.skip(reason)
        if len(self._removed) < self.cfg.max_removed_paths:
            self._removed.append({"path": path, "reason": reason})
        self._removed_total += 1

    # -- reading ----------------------------------------------------------------------------------
    def _files_git(self, repo: Path) -> tuple[dict[str, str], str]:
        sha = head_commit(repo)
        entries = list_tree(repo, sha)
        paths = {e.path for e in entries}
        wanted = []
        for e in entries:
            if not _utf8_path(e.path):
                self.skip("path_not_utf8")
                continue
            if _control_chars(e.path):
                self.skip("path_control_chars")
                continue
            if e.mode == "160000":
                self.skip_path(e.path, "submodule")
                continue
            reason = self._skip_reason_path(e.path, e.size)
            if reason:
                self.skip_path(e.path, reason)
                continue
            wanted.append(e)
        wanted = self._capped(wanted, [max(e.size, 0) for e in wanted], [e.path for e in wanted])
        files: dict[str, str] = {}
        by_sha: dict[str, list] = {}
        for e in wanted:
            by_sha.setdefault(e.sha, []).append(e)
        for blob_sha, data in read_blobs(repo, sorted(by_sha)):
            for e in by_sha[blob_sha]:
                if e.mode == "120000":  # symlink: the blob is the target path
                    target = posixpath.normpath(
                        posixpath.join(posixpath.dirname(e.path), data.decode(errors="replace"))
                    )
                    self.skip_path(
                        e.path,
                        "symlink_outside_repo"
                        if target.startswith("../") or target.startswith("/") or target == ".."
                        else "symlink"
                        if target in paths
                        else "symlink_dangling",
                    )
                    continue
                reason, text = self._skip_reason_content(e.path, data)
                if reason:
                    self.skip_path(e.path, reason)
                    continue
                assert text is not None  # no skip reason: the decoded text
                files[e.path] = text
        return files, sha

    def _files_dir(self, root: Path) -> dict[str, str]:
        files: dict[str, str] = {}
        size_read = 0
        real_root = os.path.realpath(root)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != ".git")
            for name in sorted(filenames):
                full = Path(dirpath) / name
                rel = full.relative_to(root).as_posix()
                if not _utf8_path(rel):
                    self.skip("path_not_utf8")
                    continue
                if _control_chars(rel):
                    self.skip("path_control_chars")
                    continue
                if full.is_symlink():
                    target = os.path.realpath(full)
                    inside = target == real_root or target.startswith(real_root + os.sep)
                    self.skip_path(
                        rel,
                        "symlink"
                        if inside and os.path.exists(target)
                        else "symlink_outside_repo"
                        if not inside
                        else "symlink_dangling",
                    )
                    continue
                try:
                    size = full.stat().st_size
                    reason = self._skip_reason_path(rel, size)
                    if reason:
                        self.skip_path(rel, reason)
                        continue
                    data = full.read_bytes()
                except OSError as e:
                    self.error("unreadable_file", str(full), str(e))
                    continue
                reason, text = self._skip_reason_content(rel, data)
                if reason:
                    self.skip_path(rel, reason)
                    continue
                size_read += len(data)
                if len(files) >= self.cfg.max_files or size_read > self.cfg.max_input_bytes:
                    self.skip_path(
                        rel, "too_many_files" if len(files) >= self.cfg.max_files else "repository_bytes_cap"
                    )
                    return files  # the rest of the directory is not walked (nor counted)
                assert text is not None  # no skip reason: the decoded text
                files[rel] = text
        return files

    def unit_path(self, unit: str) -> Path | None:
        return Path(unit)

    def read_unit(self, unit: str, origin: str) -> Iterator[Document]:
        root = Path(unit)
        self.stat_update("records")
        self._removed: list[dict] = []
        self._removed_total = 0
        if not root.is_dir():
            self.error("not_a_directory", unit, "repos takes repositories or directories", origin)
            return
        commit = None
        repo_name = None
        roots: list[str] = []
        if is_git_repo(root):
            try:
                files, commit = self._files_git(root)
            except GitError as e:
                self.error("bad_git_repository", unit, str(e), origin)
                return
            repo_name = remote_name(root)
            roots = root_commits(root)
        else:
            files = self._files_dir(root)
        if not files:
            self.error("no_usable_files", unit, "every file was skipped or the repository is empty", origin)
            return
        yield from self._render(root, files, repo_name, commit, roots)

    def _render(
        self,
        root: Path,
        files: dict[str, str],
        repo_name: str | None,
        commit: str | None,
        roots: list[str] | None = None,
    ) -> Iterator[Document]:
        license_id = tree_license(files)
        languages: dict[str, int] = {}
        for path, text in files.items():
            lang = language_of(path)
            if lang:
                languages[lang] = languages.get(lang, 0) + len(text.encode())
        docs = sorted((p for p in files if is_doc_path(p)), key=_doc_rank)
        code_files = {p: t for p, t in files.items() if not is_doc_path(p)}
        code = dependency_order(code_files) if self.cfg.file_order == "dependency" else sorted(code_files)
        order = docs + code

        display = repo_name or root.name.removesuffix(".git")
        base_id = f"repo:{display}" + (f"@{commit[:12]}" if commit else "")
        header = self.cfg.repo_header.format(repo=display)
        meta: dict[str, Any] = dict(
            languages=[k for k, _ in sorted(languages.items(), key=lambda kv: (-kv[1], kv[0]))],
            language_bytes=dict(sorted(languages.items())),
            commit=commit,
        )
        if roots:  # the history's root commits: decontamination knows a renamed mirror by them
            meta["root_commits"] = roots
        # split at file boundaries when the repository is larger than max_doc_bytes
        parts: list[list[str]] = [[]]
        size = len(header)
        for path in order:
            piece = len(self.cfg.file_header.format(path=path)) + len(files[path].encode()) + 1
            if parts[-1] and size + piece > self.cfg.max_doc_bytes:
                parts.append([])
                size = len(header)
            parts[-1].append(path)
            size += piece
        if len(parts) > 1:  # every part carries what the root files declare (decontamination reads it)
            meta["root_manifests"] = root_manifests(files)
        for i, paths in enumerate(parts):
            chunks = [header]
            offsets = []
            pos = len(header)
            for path in paths:
                text = files[path] if files[path].endswith("\n") else files[path] + "\n"
                block = self.cfg.file_header.format(path=path) + text
                offsets.append(pos)
                chunks.append(block)
                pos += len(block)
            doc_id = base_id if len(parts) == 1 else f"{base_id}#part{i + 1}"
            yield make_document(
                "".join(chunks),
                doc_id,
                "repo",
                repo=repo_name,
                license=license_id,
                files=paths,
                file_offsets=offsets,
                part=i + 1,
                parts=len(parts),
                **meta,
                # the repository's removed files, listed once (on its first part)
                removed_files=sorted(self._removed, key=lambda r: r["path"]) if i == 0 else [],
                removed_files_total=self._removed_total if i == 0 else 0,
            )
