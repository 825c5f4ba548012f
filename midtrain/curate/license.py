"""License filter: keep documents whose repository license is on a permissive allow-list.

The license is the SPDX id the source stage detected per repository (``metadata["license"]``). SPDX
expressions are honoured: ``MIT OR GPL-3.0`` is allowed when one alternative is, ``MIT AND GPL-3.0`` only when
all parts are. Entries ending in ``*`` are prefixes (``BSD-*`` covers BSD-2-Clause, BSD-3-Clause ...).
Documents without a license (null, ``NOASSERTION``) are kept or dropped by a separate switch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from datatrove.data import Document

from midtrain.config import Config, require
from midtrain.curate.base import CurationStep, Drop

NO_LICENSE = {"", "none", "noassertion", "unknown", "unlicensed", "no-license"}


@dataclass
class LicenseConfig(Config):
    """Permissive-license allow-list (per repository)."""

    enabled: bool = True
    # the permissive set: BSD-* covers BSD-2-Clause, BSD-3-Clause ...; PSF-2.0 is Python-2.0's other id.
    # Add e.g. Zlib, BSL-1.0 or MPL-2.0 with an override: license.allow='[MIT, Zlib]'
    allow: list[str] = field(default_factory=lambda: [
        "MIT", "BSD-*", "0BSD", "Apache-2.0", "ISC", "Unlicense", "CC0-1.0", "Python-2.0", "PSF-2.0"])
    allow_no_license: bool = True  # repositories without a detected license (and sources without one: logs)

    def check(self) -> None:
        require(bool(self.allow) or self.allow_no_license, "allow", "empty allow-list with allow_no_license=false "
                                                                     "would drop everything")


class LicenseFilter(CurationStep):
    """Drops ``dropped_license_not_allowed`` (and counts ``license_<SPDX>``) or ``dropped_no_license``."""

    name = "⚖️ license"
    step_name = "license"

    def __init__(self, cfg: LicenseConfig, exclusion_dir: str | None = None):
        super().__init__(exclusion_dir)
        self.cfg = cfg
        self._exact = {a.lower() for a in cfg.allow if not a.endswith("*")}
        self._prefixes = tuple(a[:-1].lower() for a in cfg.allow if a.endswith("*"))

    def allowed(self, spdx: str) -> bool:
        expr = spdx.strip().strip("()")
        if re.search(r"\s+OR\s+", expr, re.IGNORECASE):
            return any(self.allowed(p) for p in re.split(r"\s+OR\s+", expr, flags=re.IGNORECASE))
        if re.search(r"\s+AND\s+", expr, re.IGNORECASE):
            return all(self.allowed(p) for p in re.split(r"\s+AND\s+", expr, flags=re.IGNORECASE))
        lid = re.split(r"\s+WITH\s+", expr, flags=re.IGNORECASE)[0].strip().strip("()").lower()
        lid = lid.removesuffix("+").removesuffix("-or-later").removesuffix("-only")
        return lid in self._exact or lid.startswith(self._prefixes)

    def process(self, doc: Document) -> None:
        lic = doc.metadata.get("license")
        if lic is None or (isinstance(lic, str) and lic.strip().lower() in NO_LICENSE):
            if not self.cfg.allow_no_license:
                raise Drop("no_license")
            return
        if not self.allowed(str(lic)):
            self.stat_update(f"license_{str(lic)[:60]}")
            raise Drop("license_not_allowed", str(lic))
