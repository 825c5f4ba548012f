"""What a repository says about itself: its declared home repositories, read from its own files.

A project names its home in its packaging files and at the top of its README. This module reads the files of
a repository's *root* (a vendored copy's manifests live in a subfolder and declare nothing about the
repository that holds them) and scores each repository named there:

- ``DECLARED`` (2): a packaging field whose meaning is "this project's source lives here" —
  pyproject ``[project.urls]`` / poetry ``homepage``/``repository``, ``setup.py``/``setup.cfg`` ``url`` and
  ``project_urls``, ``package.json`` ``repository``/``homepage``/``bugs``, ``Cargo.toml``
  ``repository``/``homepage``, the ``go.mod`` module path, ``pom.xml`` ``<scm>``, ``composer.json``
  ``homepage``/``support.source``, a gemspec ``homepage``/``source_code_uri``;
- ``BADGE`` (2): a CI/coverage/package badge of that repository in the README's first lines (projects put
  their own badges there, not their dependencies');
- ``MENTION`` (1): a plain GitHub link in the README's first lines — a dependency or "inspired by" link
  looks exactly like this, so a mention alone never establishes identity.

:func:`declared_homes` returns ``{owner/name: score}``; a score of :data:`HOME_SCORE` or more is a declared home.
Dependency lists (``dependencies``, ``require``, ``[dependencies]``) are never read.
"""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from collections.abc import Callable, Iterable
from typing import Any

DECLARED = 2
BADGE = 2
MENTION = 1
HOME_SCORE = 2
README_LINES = 30  # a README's "first lines": where projects put their title, badges and home link

_HOSTED = re.compile(r"(?:github\.com|gitlab\.com|bitbucket\.org)[:/]+([\w.-]+)/([\w.-]+)", re.IGNORECASE)
# badge services that encode the project's own repository in the image/link URL
_BADGES = [
    re.compile(r"github\.com/([\w.-]+)/([\w.-]+)/(?:actions/)?workflows/", re.IGNORECASE),
    re.compile(r"img\.shields\.io/github/[\w.-]+/([\w.-]+)/([\w.-]+)", re.IGNORECASE),
    re.compile(r"travis-ci\.(?:org|com)/([\w.-]+)/([\w.-]+)", re.IGNORECASE),
    re.compile(r"codecov\.io/(?:gh|github)/([\w.-]+)/([\w.-]+)", re.IGNORECASE),
    re.compile(r"coveralls\.io/(?:repos/)?(?:github/)?([\w.-]+)/([\w.-]+)", re.IGNORECASE),
    re.compile(r"app\.codacy\.com/gh/([\w.-]+)/([\w.-]+)", re.IGNORECASE),
    re.compile(r"circleci\.com/gh/([\w.-]+)/([\w.-]+)", re.IGNORECASE),
]
_NOT_REPO = {"sponsors", "orgs", "topics", "features", "marketplace", "apps", "settings", "site", "about"}


def _repo_from_url(value: Any) -> str | None:
    """owner/name of a GitHub/GitLab/Bitbucket URL (any form), or None."""
    if not isinstance(value, str):
        return None
    m = _HOSTED.search(value)
    if not m:
        return None
    owner, name = m.group(1).lower(), m.group(2).lower().removesuffix(".git")
    if owner in _NOT_REPO or not name or name in {".", ".."}:
        return None
    return f"{owner}/{name}"


def _urls(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _urls(v)
    elif isinstance(value, list):
        for v in value:
            yield from _urls(v)


def _pyproject(text: str) -> Iterable[str]:
    data = tomllib.loads(text)
    project = data.get("project") or {}
    yield from _urls(project.get("urls"))
    poetry = (data.get("tool") or {}).get("poetry") or {}
    for key in ("homepage", "repository", "documentation", "urls"):
        yield from _urls(poetry.get(key))


def _setup_cfg(text: str) -> Iterable[str]:
    cp = configparser.ConfigParser(interpolation=None)
    cp.read_string(text)
    if cp.has_section("metadata"):
        for key in ("url", "home_page", "home-page", "project_urls", "download_url"):
            if cp.has_option("metadata", key):
                yield cp.get("metadata", key)


_SETUP_PY = re.compile(r"""\b(?:url|download_url|project_urls)\s*=\s*(\{[^}]*\}|['"][^'"]+['"])""")


def _setup_py(text: str) -> Iterable[str]:
    for m in _SETUP_PY.finditer(text):
        yield m.group(1)


def _package_json(text: str) -> Iterable[str]:
    data = json.loads(text)
    if isinstance(data, dict):
        for key in ("repository", "homepage", "bugs"):
            yield from _urls(data.get(key))


def _cargo(text: str) -> Iterable[str]:
    pkg = tomllib.loads(text).get("package") or {}
    for key in ("repository", "homepage"):
        yield from _urls(pkg.get(key))


def _go_mod(text: str) -> Iterable[str]:
    m = re.search(r"^\s*module\s+(\S+)", text, re.MULTILINE)
    if m:
        yield m.group(1)


def _pom(text: str) -> Iterable[str]:
    m = re.search(r"<scm>(.*?)</scm>", text, re.DOTALL)
    if m:
        yield from re.findall(r"<(?:url|connection|developerConnection)>([^<]+)<", m.group(1))


def _composer(text: str) -> Iterable[str]:
    data = json.loads(text)
    if isinstance(data, dict):
        yield from _urls(data.get("homepage"))
        yield from _urls((data.get("support") or {}).get("source") if isinstance(data.get("support"), dict) else None)


_GEMSPEC = re.compile(
    r"""\.(?:homepage|metadata\[\s*["'](?:source_code_uri|homepage_uri)["']\s*\])"""
    r"""\s*=\s*["']([^"']+)"""
)


def _gemspec(text: str) -> Iterable[str]:
    for m in _GEMSPEC.finditer(text):
        yield m.group(1)


# root file name (or predicate) -> field reader
_MANIFESTS: list[tuple[Callable[[str], bool], Callable[[str], Iterable[str]]]] = [
    (lambda p: p == "pyproject.toml", _pyproject),
    (lambda p: p == "setup.cfg", _setup_cfg),
    (lambda p: p == "setup.py", _setup_py),
    (lambda p: p == "package.json", _package_json),
    (lambda p: p == "Cargo.toml", _cargo),
    (lambda p: p == "go.mod", _go_mod),
    (lambda p: p == "pom.xml", _pom),
    (lambda p: p == "composer.json", _composer),
    (lambda p: p.endswith(".gemspec"), _gemspec),
]


def _is_readme(path: str) -> bool:
    return "/" not in path and path.lower().split(".")[0] == "readme"


def declared_homes(files: dict[str, str]) -> dict[str, int]:
    """{owner/name: score} of the repositories a project's root files name as its home (see module doc).

    ``files`` maps repository-relative paths to contents; only root-level files are read. A manifest that
    does not parse is ignored (it declares nothing)."""
    scores: dict[str, int] = {}

    def add(repo: str | None, score: int) -> None:
        if repo:
            scores[repo] = max(scores.get(repo, 0), score)

    for path, text in files.items():
        if "/" in path:
            continue
        for matches, reader in _MANIFESTS:
            if not matches(path):
                continue
            try:
                for url in reader(text):
                    for m in _HOSTED.finditer(url):
                        add(_repo_from_url(m.group(0)), DECLARED)
            except (ValueError, TypeError, KeyError, AttributeError, configparser.Error):
                pass
        if _is_readme(path):
            head = "\n".join(text.splitlines()[:README_LINES])
            for pattern in _BADGES:
                for m in pattern.finditer(head):
                    add(_repo_from_url(f"github.com/{m.group(1)}/{m.group(2)}"), BADGE)
            for m in _HOSTED.finditer(head):
                add(_repo_from_url(m.group(0)), MENTION)
    return scores
