"""The model families midtrain trains and converts: one ``ModelFamily`` spec per file, registered here.

Adding a family: copy a spec file (``qwen3.py``, ``llama3.py``), change its facts, and add it to
``FAMILIES``; ``model.family``, ``midtrain convert`` (both ways) and the export read it from here.
"""

from __future__ import annotations

from midtrain.config import ConfigError
from midtrain.train.families.llama3 import LLAMA3
from midtrain.train.families.qwen3 import QWEN3
from midtrain.train.families.spec import HFArch, ModelFamily, MoeLayout, Row

__all__ = ["FAMILIES", "HFArch", "ModelFamily", "MoeLayout", "Row", "by_model_type", "family", "hf_model_types"]

FAMILIES: dict[str, ModelFamily] = {spec.name: spec for spec in (QWEN3, LLAMA3)}


def family(name: str) -> ModelFamily:
    """The registered spec of ``model.family`` ``name`` (ModelConfig.check refuses any other name)."""
    if name not in FAMILIES:
        raise ConfigError(f"family: {name!r} is not a registered model family (registered: {', '.join(FAMILIES)})")
    return FAMILIES[name]


def hf_model_types() -> dict[str, tuple[ModelFamily, bool]]:
    """Hugging Face model_type -> (its family, whether it is the family's MoE variant)."""
    return {arch.model_type: (spec, moe) for spec in FAMILIES.values() for arch, moe in spec.hf_archs()}


def by_model_type(model_type: object, where: str = "config.json") -> tuple[ModelFamily, bool]:
    """(family, is MoE) of a config.json's model_type; refuses one no registered family has."""
    known = hf_model_types()
    if not isinstance(model_type, str) or model_type not in known:
        raise ConfigError(
            f"{where}: model_type {model_type!r} is not supported (supported: {', '.join(known)}; "
            f"registered families: {', '.join(FAMILIES)})"
        )
    return known[model_type]
