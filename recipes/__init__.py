"""Recipes: Python functions returning configs, found by name.

A recipe is registered with ``@recipe``; variants are a base recipe plus a few changed fields
(``replace``/``apply_overrides``), never a copy. ``midtrain recipes`` lists them.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

from midtrain.config import Config, ConfigError


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str  # train | sft | mixture | protocol | ...
    fn: Callable[[], Config]
    doc: str

    def build(self, overrides: list[str] | None = None) -> Config:
        cfg = self.fn()
        return cfg.apply_overrides(overrides or [])


_REGISTRY: dict[str, Recipe] = {}


def recipe(kind: str, name: str | None = None) -> Callable[[Callable[[], Config]], Callable[[], Config]]:
    """Register a recipe function under its name (or ``name``)."""

    def deco(fn: Callable[[], Config]) -> Callable[[], Config]:
        key = name or fn.__name__
        if key in _REGISTRY:
            raise ValueError(f"recipe '{key}' registered twice")
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        _REGISTRY[key] = Recipe(key, kind, fn, doc)
        return fn

    return deco


def _load_all() -> None:
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")


def all_recipes() -> dict[str, Recipe]:
    _load_all()
    return dict(sorted(_REGISTRY.items()))


def get_recipe(name: str) -> Recipe:
    recipes = all_recipes()
    if name not in recipes:
        close = difflib.get_close_matches(name, list(recipes), n=1, cutoff=0.4)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"unknown recipe '{name}'{hint}; `midtrain recipes` lists them")
    return recipes[name]
