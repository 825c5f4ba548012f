"""docs/reference.md: every config field, its type, default and note, generated from the config dataclasses.

``python tests/config_reference.py`` rewrites docs/reference.md; tests/test_config_reference.py checks that the
committed page is what this generates, so a field added, removed or renamed without regenerating fails there.
A field's note is the comment written beside it (or on the lines above it) in its class's source.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from pathlib import Path

from midtrain.config import Config, _config_class
from midtrain.eval.config import LmEvalConfig, ProxyConfig, SweBenchConfig
from midtrain.launch.site import SiteConfig
from midtrain.pack.pack_step import PackConfig
from midtrain.protocol import ProtocolConfig
from midtrain.sft.config import SFTConfig
from midtrain.sources.prep import CurationConfig
from midtrain.sources.specs import SOURCE_SPECS
from midtrain.sweep_config import SweepConfig
from midtrain.train.config import TrainConfig

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "reference.md"

# (where a user sets it, the config class): the configs a command line resolves, in the guides' order
ROOTS: list[tuple[str, type[Config]]] = [
    *[(f"`midtrain prep {name}` (`{name}.FIELD=...`)", spec.config) for name, spec in SOURCE_SPECS.items()],
    ("`midtrain prep SOURCE` curation (`redact.FIELD=...`, ...)", CurationConfig),
    ("`midtrain pack` (`FIELD=...`)", PackConfig),
    ("`midtrain train RECIPE` (`FIELD=...`)", TrainConfig),
    ("`midtrain sft RECIPE` (`FIELD=...`)", SFTConfig),
    ("`midtrain eval proxy`", ProxyConfig),
    ("`midtrain eval lm-eval`", LmEvalConfig),
    ("`midtrain eval swebench`", SweBenchConfig),
    ("`midtrain submit protocol RECIPE`", ProtocolConfig),
    ("`midtrain sweep RECIPE`", SweepConfig),
    ("a site config (`--site FILE`, `--site-set FIELD=...`)", SiteConfig),
]

_FIELD = re.compile(r"^\s+(\w+)\s*:")


def _type_text(tp: object) -> str:
    text = tp.__name__ if isinstance(tp, type) else str(tp)
    return re.sub(r"\b(typing|midtrain(\.\w+)*)\.", "", text).replace("NoneType", "None")


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if isinstance(value, Config):
        return ""
    return f"`{value!r}`"


def _notes(cls: type) -> dict[str, str]:
    """Field name -> the comment beside it or on the lines just above it, from the class body (bases first)."""
    notes: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, Config)) or klass is Config:
            continue
        above: list[str] = []
        for line in inspect.getsource(klass).splitlines()[1:]:
            stripped = line.strip()
            if stripped.startswith("#"):
                above.append(stripped.lstrip("# "))
                continue
            m = _FIELD.match(line)
            if m and line.startswith("    ") and not line.startswith("     "):
                beside = line.split("  # ", 1)[1].strip() if "  # " in line else ""
                note = " ".join([*above, beside]).strip()
                if note:
                    notes[m.group(1)] = note
            above = []
    return notes


def _anchor(cls: type) -> str:
    return cls.__name__.lower()


def _section(cls: type[Config], where: str, out: list[str], done: set[type]) -> None:
    """One table for ``cls``, then one for each config class among its fields not described yet."""
    done.add(cls)
    hints = typing.get_type_hints(cls)
    notes = _notes(cls)
    doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    if doc.startswith(f"{cls.__name__}("):  # no docstring: the one dataclasses writes (the signature)
        doc = ""
    out += [f"## {cls.__name__}", "", f"Set in {where}. {doc}".strip(), ""]
    out += ["| field | type | default | note |", "|---|---|---|---|"]
    subs: list[tuple[str, type[Config]]] = []
    for f in dataclasses.fields(cls):
        sub = _config_class(hints[f.name])
        kind = f"[{sub.__name__}](#{_anchor(sub)})" if sub else f"`{_type_text(hints[f.name])}`"
        cells = [f"`{f.name}`", kind, _default_text(f), notes.get(f.name, "")]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        if sub and sub not in done:
            subs.append((f"{where}, as `{f.name}.FIELD`", sub))
    out.append("")
    for sub_where, sub in subs:
        if sub not in done:
            _section(sub, sub_where, out, done)


def generate() -> str:
    out = [
        "# Config reference",
        "",
        "[Back to the README](../README.md) · [all guides](../README.md#the-guides)",
        "",
        "Every field of every config a command line resolves, generated from the config dataclasses by",
        "`tests/config_reference.py` (do not edit by hand; tests/test_config_reference.py checks it is current).",
        "A nested config's fields are set with a dotted key (`optim.lr=1e-3`); `midtrain config` prints the",
        "values a recipe gives them ([configs.md](configs.md)).",
        "",
    ]
    done: set[type] = set()
    for where, cls in ROOTS:
        if cls not in done:
            _section(cls, where, out, done)
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":
    PAGE.write_text(generate())
    sys.exit(0)
