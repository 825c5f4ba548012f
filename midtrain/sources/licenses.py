"""SPDX license id of a repository from its LICENSE/COPYING file (key phrases of the common licenses)."""

from __future__ import annotations

import re

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
