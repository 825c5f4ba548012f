"""SPDX license id of a repository from its LICENSE/COPYING file (key phrases of the common licenses), and
the SPDX id of a license value a dataset table gives (GitHub's license keys).

A tree's license is the first license file at its root, by name (COPYING before LICENSE), whose text matches a
rule: :func:`tree_license` for a tree read into memory (a repository document), :func:`license_at` for a
commit of a git repository (commit histories, pull requests at their base).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from midtrain.sources.git import list_tree, read_blobs

if TYPE_CHECKING:
    from midtrain.sources.git import TreeEntry

LICENSE_FILE = re.compile(r"^(licen[cs]e|copying|unlicense)([-._][\w.-]*)?$", re.IGNORECASE)

# (current SPDX id, phrases that must all appear), most specific first; matched on lower-cased, space-collapsed
# text. A GNU license text does not say "or later" (file headers do), so the plain -only id is reported.
_RULES: list[tuple[str, tuple[str, ...]]] = [
    ("AGPL-3.0-only", ("gnu affero general public license", "version 3")),
    ("LGPL-3.0-only", ("gnu lesser general public license", "version 3")),
    ("LGPL-2.1-only", ("gnu lesser general public license", "version 2.1")),
    ("LGPL-2.1-only", ("gnu library general public license",)),
    ("GPL-3.0-only", ("gnu general public license", "version 3")),
    ("GPL-2.0-only", ("gnu general public license", "version 2")),
    ("Apache-2.0", ("apache license", "version 2.0")),
    ("MPL-2.0", ("mozilla public license", "2.0")),
    ("EPL-2.0", ("eclipse public license", "2.0")),
    ("EPL-1.0", ("eclipse public license",)),
    ("BSL-1.0", ("boost software license",)),
    ("Unlicense", ("this is free and unencumbered software released into the public domain",)),
    ("CC0-1.0", ("cc0 1.0 universal",)),
    ("WTFPL", ("do what the fuck you want to",)),
    ("Zlib", ("this software is provided 'as-is'", "altered source versions must be plainly marked")),
    ("ISC", ("permission to use, copy, modify, and/or distribute this software for any purpose",)),
    ("ISC", ("permission to use, copy, modify, and distribute this software for any purpose", "isc")),
    ("MIT", ("permission is hereby granted, free of charge",)),
    ("BSD-3-Clause", ("redistribution and use in source and binary forms", "neither the name")),
    ("BSD-3-Clause", ("redistribution and use in source and binary forms", "names of its contributors")),
    ("BSD-2-Clause", ("redistribution and use in source and binary forms",)),
]


def is_license_file(name: str) -> bool:
    return bool(LICENSE_FILE.match(name))


def detect_spdx(text: str) -> str | None:
    """The SPDX id a license text matches, or None when no rule matches."""
    norm = re.sub(r"\s+", " ", text.lower().replace("\u2019", "'"))
    for spdx, phrases in _RULES:
        if all(p in norm for p in phrases):
            return spdx
    return None


def root_license_files(paths: Iterable[str]) -> list[str]:
    """The license files at the root of a tree (PATHS relative to it), in the order they are read."""
    return sorted(p for p in paths if "/" not in p and is_license_file(p))


def _first_match(texts: Iterable[str]) -> str | None:
    return next((spdx for spdx in map(detect_spdx, texts) if spdx), None)


def tree_license(files: Mapping[str, str]) -> str | None:
    """The SPDX id of a tree given as {path relative to its root: text}, or None."""
    return _first_match(files[p] for p in root_license_files(files))


def license_at(repo: Path, rev: str = "HEAD", tree: Iterable[TreeEntry] | None = None) -> str | None:
    """The SPDX id of the tree of REV in the git repository REPO (a symlinked license file is not read), or None.
    TREE: REV's entries where the caller has them listed already (a pull request's base tree is read once)."""

    blobs = {e.path: e.sha for e in (list_tree(repo, rev) if tree is None else tree) if e.mode != "120000"}
    shas = [blobs[p] for p in root_license_files(blobs)]
    return _first_match(data.decode("utf-8", "replace") for _, data in read_blobs(repo, shas))


# GitHub's license keys (codeparrot/github-code's ``license`` column, GitHub's API ``license.key``) -> SPDX ids,
# with the same current -only ids as the LICENSE-file detection above
GITHUB_KEYS: dict[str, str] = {
    "mit": "MIT",
    "apache-2.0": "Apache-2.0",
    "gpl-3.0": "GPL-3.0-only",
    "gpl-2.0": "GPL-2.0-only",
    "agpl-3.0": "AGPL-3.0-only",
    "lgpl-3.0": "LGPL-3.0-only",
    "lgpl-2.1": "LGPL-2.1-only",
    "bsd-3-clause": "BSD-3-Clause",
    "bsd-2-clause": "BSD-2-Clause",
    "bsd-3-clause-clear": "BSD-3-Clause-Clear",
    "bsd-4-clause": "BSD-4-Clause",
    "0bsd": "0BSD",
    "cc0-1.0": "CC0-1.0",
    "epl-1.0": "EPL-1.0",
    "epl-2.0": "EPL-2.0",
    "mpl-2.0": "MPL-2.0",
    "unlicense": "Unlicense",
    "isc": "ISC",
    "artistic-2.0": "Artistic-2.0",
    "bsl-1.0": "BSL-1.0",
    "wtfpl": "WTFPL",
    "zlib": "Zlib",
    "cc-by-4.0": "CC-BY-4.0",
    "cc-by-sa-4.0": "CC-BY-SA-4.0",
    "eupl-1.2": "EUPL-1.2",
    "osl-3.0": "OSL-3.0",
    "afl-3.0": "AFL-3.0",
    "ofl-1.1": "OFL-1.1",
    "ms-pl": "MS-PL",
    "ms-rl": "MS-RL",
    "upl-1.0": "UPL-1.0",
    "ncsa": "NCSA",
    "postgresql": "PostgreSQL",
}


def spdx_id(value: str) -> str | None:
    """A license value from a table as an SPDX id: GitHub's lower-case keys are mapped; anything else (SPDX ids
    such as ``MIT``, expressions, GitHub's ``other``) is kept as given for the license step to judge."""
    v = value.strip()
    if not v:
        return None
    return GITHUB_KEYS.get(v, v)
