"""License filter: keep documents whose repository license is on a permissive allow-list.

The license is the SPDX id (or expression) the source stage detected per repository
(``metadata["license"]``). Expressions are parsed and evaluated with the `license-expression` library:
parentheses, ``OR`` (allowed when one alternative is), ``AND`` (only when every part is), ``WITH`` (the
license before the exception decides), and deprecated ids normalised to current ones (``GPL-3.0`` is
``GPL-3.0-only``). Allow-list entries ending in ``*`` are prefixes (``BSD-*`` covers BSD-2-Clause,
BSD-3-Clause ...) except for the advertising-clause BSD licenses (BSD-4-Clause and its variants), which are
admitted only when listed by name. An expression that does not parse is not allowed. Documents without a
license (null, ``NOASSERTION``) are kept or dropped by a separate switch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from datatrove.data import Document

from midtrain.config import Config, require
from midtrain.curate.base import CurationStep, Drop

# never admitted by a wildcard entry: the 4-clause (advertising clause) BSD family is not permissive enough
WILDCARD_EXCLUDED = re.compile(r"^bsd-4", re.IGNORECASE)
NO_LICENSE = {"", "none", "noassertion", "unknown", "unlicensed", "no-license"}


@dataclass
class LicenseConfig(Config):
    """Permissive-license allow-list (per repository)."""

    enabled: bool = True
    # the permissive set: BSD-* covers BSD-2-Clause, BSD-3-Clause ...; PSF-2.0 is Python-2.0's other id.
    # Add e.g. Zlib, BSL-1.0 or MPL-2.0 with an override: license.allow='[MIT, Zlib]'
    allow: list[str] = field(
        default_factory=lambda: [
            "MIT",
            "BSD-*",
            "0BSD",
            "Apache-2.0",
            "ISC",
            "Unlicense",
            "CC0-1.0",
            "Python-2.0",
            "PSF-2.0",
        ]
    )
    allow_no_license: bool = True  # repositories without a detected license (and sources without one: logs)

    def check(self) -> None:
        require(
            bool(self.allow) or self.allow_no_license,
            "allow",
            "empty allow-list with allow_no_license=false would drop everything",
        )


@lru_cache(maxsize=1)
def _licensing():
    from license_expression import get_spdx_licensing

    return get_spdx_licensing()


def normalize_spdx(expression: str) -> str:
    """The expression with current SPDX ids (``GPL-3.0`` -> ``GPL-3.0-only``); ValueError if it does not parse."""
    from license_expression import ExpressionError

    try:
        parsed = _licensing().parse(expression)
    except ExpressionError as e:
        raise ValueError(f"not an SPDX license expression: {expression!r} ({e})") from None
    if parsed is None:
        raise ValueError(f"empty license expression: {expression!r}")
    return str(parsed)


class LicenseFilter(CurationStep):
    """Drops ``dropped_license_not_allowed`` (and counts ``license_<SPDX>``) or ``dropped_no_license``."""

    name = "⚖️ license"
    step_name = "license"

    def __init__(self, cfg: LicenseConfig, exclusion_dir: str | None = None):
        super().__init__(exclusion_dir)
        self.cfg = cfg
        self._exact = {self._key(a) for a in cfg.allow if not a.endswith("*")}
        self._prefixes = tuple(a[:-1].lower() for a in cfg.allow if a.endswith("*"))
        self._verdicts: dict[str, bool] = {}  # expression -> allowed: a corpus has few distinct licenses

    @staticmethod
    def _key(license_id: str) -> str:
        try:
            return normalize_spdx(license_id).lower()
        except ValueError:
            return license_id.strip().lower()

    def _symbol_allowed(self, key: str) -> bool:
        key = key.lower()
        if key in self._exact:
            return True
        return key.startswith(self._prefixes) and not WILDCARD_EXCLUDED.match(key) if self._prefixes else False

    def allowed(self, spdx: str) -> bool:
        """Whether the SPDX expression ``spdx`` is allowed by the allow-list (see the module doc)."""
        verdict = self._verdicts.get(spdx)
        if verdict is None:
            verdict = self._evaluate(spdx)
            if len(self._verdicts) < 4096:
                self._verdicts[spdx] = verdict
        return verdict

    def _evaluate(self, spdx: str) -> bool:
        from license_expression import AND, OR, ExpressionError, LicenseSymbol, LicenseWithExceptionSymbol

        try:
            expr = _licensing().parse(spdx)
        except ExpressionError:
            return False

        def ok(node) -> bool:
            if isinstance(node, LicenseWithExceptionSymbol):
                return ok(node.license_symbol)
            if isinstance(node, LicenseSymbol):
                return self._symbol_allowed(node.key)
            if isinstance(node, OR):
                return any(ok(a) for a in node.args)
            if isinstance(node, AND):
                return all(ok(a) for a in node.args)
            return False

        return expr is not None and ok(expr)

    def process(self, doc: Document) -> None:
        lic = doc.metadata.get("license")
        if lic is None or (isinstance(lic, str) and lic.strip().lower() in NO_LICENSE):
            if not self.cfg.allow_no_license:
                raise Drop("no_license")
            return
        if not self.allowed(str(lic)):
            self.stat_update(f"license_{str(lic)[:60]}")
            raise Drop("license_not_allowed", str(lic))
