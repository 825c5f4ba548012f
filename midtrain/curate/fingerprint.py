"""Content fingerprints of benchmark repositories: the index `midtrain decontam index` writes and prep reads.

A file's fingerprint is a hash of its normalised text (line endings unified, trailing whitespace and blank
lines dropped, so a release tarball, a CRLF checkout and a re-indented-at-the-end copy hash alike). Files that
carry no identity are left out: short files (under ``min_chars`` after normalisation: empty ``__init__.py``,
one-line configs) and boilerplate every project shares (license texts, ``.gitignore``, codes of conduct).

The index file (JSON, gzip-compressed when the name ends in ``.gz``) holds, per benchmark repository, its
fingerprints, its file paths and the root commits of its history when it was read from a git clone::

    {"format": "midtrain-decontam-index", "version": 1, "min_chars": 200,
     "repos": {"owner/name": {"source": "/path/read", "head": sha|null, "root_commits": [...],
                              "files": N, "paths": [...], "hashes": ["<16 hex>", ...]}}}
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

FORMAT = "midtrain-decontam-index"
VERSION = 1
MIN_CHARS = 200
# files whose content is shared boilerplate, not the project's own: never fingerprinted
_BOILERPLATE = re.compile(r"^(licen[cs]e|copying|notice|authors|contributors|code_of_conduct|security|"
                          r"\.gitignore|\.gitattributes|\.editorconfig|\.mailmap|\.pre-commit-config)",
                          re.IGNORECASE)


def normalize(text: str) -> str:
    """The text a fingerprint is taken of: unified line ends, no trailing whitespace, no blank lines."""
    lines = (ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    return "\n".join(ln for ln in lines if ln)


def fingerprint(path: str, text: str, min_chars: int = MIN_CHARS) -> str | None:
    """16-hex-digit hash of a file's normalised text, or None for a file that identifies nothing."""
    if _BOILERPLATE.match(path.rsplit("/", 1)[-1]):
        return None
    norm = normalize(text)
    if len(norm) < min_chars:
        return None
    return hashlib.blake2b(norm.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass
class RepoPrint:
    source: str
    head: str | None
    root_commits: list[str]
    paths: list[str]
    hashes: list[str]


@dataclass
class ContentIndex:
    """Loaded index: fingerprint -> repositories, path -> repositories, root commit -> repository."""

    min_chars: int = MIN_CHARS
    repos: dict[str, RepoPrint] = field(default_factory=dict)
    by_hash: dict[str, set[str]] = field(default_factory=dict)
    by_path: dict[str, set[str]] = field(default_factory=dict)
    roots: dict[str, str] = field(default_factory=dict)

    def add(self, repo: str, rp: RepoPrint) -> None:
        self.repos[repo] = rp
        for h in rp.hashes:
            self.by_hash.setdefault(h, set()).add(repo)
        for p in rp.paths:
            self.by_path.setdefault(p, set()).add(repo)
        for r in rp.root_commits:
            self.roots.setdefault(r, repo)

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "min_chars": self.min_chars,
                "repos": {name: {"source": rp.source, "head": rp.head, "root_commits": rp.root_commits,
                                 "files": len(rp.hashes), "paths": rp.paths, "hashes": rp.hashes}
                          for name, rp in sorted(self.repos.items())}}

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.to_json(), sort_keys=True).encode()
        tmp = path.with_name(path.name + ".tmp")
        if path.name.endswith(".gz"):
            tmp.write_bytes(gzip.compress(data, mtime=0))
        else:
            tmp.write_bytes(data)
        tmp.replace(path)


class BadIndexError(ValueError):
    """An index file that cannot be used; the message names the file and what is wrong."""


def load_index(path: str | Path) -> ContentIndex:
    """Read an index written by :meth:`ContentIndex.save`; BadIndexError naming the file when it is not one."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, ValueError, EOFError) as e:
        raise BadIndexError(f"decontam.index: cannot read {path}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BadIndexError(f"decontam.index: {path} is not a {FORMAT} file (build one with `midtrain decontam index`)")
    if data.get("version") != VERSION:
        raise BadIndexError(f"decontam.index: {path} has version {data.get('version')}, this midtrain reads {VERSION}")
    idx = ContentIndex(min_chars=int(data.get("min_chars", MIN_CHARS)))
    for name, r in (data.get("repos") or {}).items():
        idx.add(name.lower(), RepoPrint(r.get("source", ""), r.get("head"), list(r.get("root_commits") or []),
                                        list(r.get("paths") or []), list(r.get("hashes") or [])))
    return idx


def repo_prints(files: Iterable[tuple[str, str]], min_chars: int = MIN_CHARS) -> tuple[list[str], list[str]]:
    """(sorted paths, sorted unique fingerprints) of a repository's (path, text) files."""
    paths, hashes = set(), set()
    for path, text in files:
        paths.add(path)
        h = fingerprint(path, text, min_chars)
        if h:
            hashes.add(h)
    return sorted(paths), sorted(hashes)
