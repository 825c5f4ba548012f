"""Content fingerprints of benchmark repositories: the index `midtrain decontam index` writes and prep reads.

A file's fingerprint is a hash of its normalised text (line endings unified, trailing whitespace and blank
lines dropped, so a release tarball, a CRLF checkout and a re-indented-at-the-end copy hash alike). Files that
carry no identity are left out: short files (under ``min_chars`` after normalisation: empty ``__init__.py``,
one-line configs) and boilerplate every project shares (license texts, ``.gitignore``, codes of conduct).

Copies are often edited a little (a vendored package with its imports rewritten, an older release), so each
file also gets a MinHash signature of its set of distinctive lines (stripped lines of 10+ characters; files
with at least 20 of them), cut into ``BANDS`` bands of ``ROWS`` values: two files sharing ``MIN_BANDS`` or
more band keys are near-duplicates (about 96% of pairs whose line sets have Jaccard similarity 0.6 do, about
13% at 0.3 and 0.02% at 0.1).

The index file (JSON, gzip-compressed when the name ends in ``.gz``) holds, per benchmark repository, its
fingerprints, its file paths, the band keys of each near-duplicate-able file and the root commits of its
history when it was read from a git clone::

    {"format": "midtrain-decontam-index", "version": 1, "min_chars": 200,
     "repos": {"owner/name": {"source": "/path/read", "head": sha|null, "root_commits": [...],
                              "files": N, "paths": [...], "hashes": ["<16 hex>", ...],
                              "bands": [["<8 hex>" x BANDS], ...]}}}
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FORMAT = "midtrain-decontam-index"
VERSION = 1
MIN_CHARS = 200
# files whose content is shared boilerplate, not the project's own: never fingerprinted
_BOILERPLATE = re.compile(
    r"^(licen[cs]e|copying|notice|authors|contributors|code_of_conduct|security|"
    r"\.gitignore|\.gitattributes|\.editorconfig|\.mailmap|\.pre-commit-config)",
    re.IGNORECASE,
)


BANDS, ROWS, MIN_BANDS = 21, 3, 2
MIN_LINE_CHARS, MIN_LINES = 10, 20
_PRIME = np.uint64((1 << 61) - 1)
_rng = np.random.RandomState(20240601)  # fixed: signatures must agree between the index and every prep run
_A = _rng.randint(1, 1 << 61, size=BANDS * ROWS, dtype=np.uint64)
_B = _rng.randint(0, 1 << 61, size=BANDS * ROWS, dtype=np.uint64)


def band_keys(text: str) -> list[str] | None:
    """The MinHash band keys of a file's distinctive lines, or None when it has too few to compare."""
    lines = {ln.strip() for ln in text.splitlines()}
    lines = {ln for ln in lines if len(ln) >= MIN_LINE_CHARS}
    if len(lines) < MIN_LINES:
        return None
    h = np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(ln.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
            for ln in sorted(lines)
        ),
        dtype=np.uint64,
        count=len(lines),
    )
    with np.errstate(over="ignore"):
        sig = ((h[:, None] * _A[None, :] + _B[None, :]) % _PRIME).min(axis=0)
    return [
        hashlib.blake2b(sig[i * ROWS : (i + 1) * ROWS].tobytes() + bytes([i]), digest_size=4).hexdigest()
        for i in range(BANDS)
    ]


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
    bands: list[list[str]] = field(default_factory=list)


@dataclass
class ContentIndex:
    """Loaded index: fingerprint -> repositories, path -> repositories, root commit -> repository."""

    min_chars: int = MIN_CHARS
    repos: dict[str, RepoPrint] = field(default_factory=dict)
    by_hash: dict[str, set[str]] = field(default_factory=dict)
    by_path: dict[str, set[str]] = field(default_factory=dict)
    roots: dict[str, str] = field(default_factory=dict)
    by_band: dict[str, set[tuple[str, int]]] = field(default_factory=dict)

    def add(self, repo: str, rp: RepoPrint) -> None:
        self.repos[repo] = rp
        for h in rp.hashes:
            self.by_hash.setdefault(h, set()).add(repo)
        for p in rp.paths:
            self.by_path.setdefault(p, set()).add(repo)
        for r in rp.root_commits:
            self.roots.setdefault(r, repo)
        for i, keys in enumerate(rp.bands):
            for k in keys:
                self.by_band.setdefault(k, set()).add((repo, i))

    def near(self, text: str) -> set[str]:
        """Benchmark repositories holding a near-duplicate of this file (MIN_BANDS band keys in common)."""
        keys = band_keys(text) if self.by_band else None
        if not keys:
            return set()
        votes: dict[tuple[str, int], int] = {}
        for k in keys:
            for hit in self.by_band.get(k, ()):
                votes[hit] = votes.get(hit, 0) + 1
        return {repo for (repo, _), n in votes.items() if n >= MIN_BANDS}

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "min_chars": self.min_chars,
            "repos": {
                name: {
                    "source": rp.source,
                    "head": rp.head,
                    "root_commits": rp.root_commits,
                    "files": len(rp.hashes),
                    "paths": rp.paths,
                    "hashes": rp.hashes,
                    "bands": rp.bands,
                }
                for name, rp in sorted(self.repos.items())
            },
        }

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
        idx.add(
            name.lower(),
            RepoPrint(
                r.get("source", ""),
                r.get("head"),
                list(r.get("root_commits") or []),
                list(r.get("paths") or []),
                list(r.get("hashes") or []),
                [list(b) for b in r.get("bands") or []],
            ),
        )
    return idx


def repo_prints(
    files: Iterable[tuple[str, str]], min_chars: int = MIN_CHARS, near: bool = True
) -> tuple[list[str], list[str], list[list[str]]]:
    """(sorted paths, sorted unique fingerprints, band keys of each near-duplicate-able file) of a
    repository's (path, text) files."""
    paths, hashes, bands = set(), set(), set()
    for path, text in files:
        paths.add(path)
        h = fingerprint(path, text, min_chars)
        if h:
            hashes.add(h)
            keys = band_keys(text) if near else None
            if keys:
                bands.add(tuple(keys))
    return sorted(paths), sorted(hashes), [list(b) for b in sorted(bands)]
