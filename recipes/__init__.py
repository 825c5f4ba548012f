"""Recipes: Python functions returning configs, found by name.

A recipe is registered with ``@recipe``; variants are a base recipe plus a few changed fields
(``replace``/``apply_overrides``), never a copy. ``midtrain recipes`` lists them. Commands turn a name (or a run's
saved config.yaml) into a config with :func:`resolve_config`, which also refuses a recipe of the wrong kind.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from midtrain.config import Config, ConfigError
from midtrain.sft.config import SFTConfig
from midtrain.train.config import TrainConfig, read_run_config

if TYPE_CHECKING:
    from midtrain.protocol import ProtocolConfig
    from midtrain.sft.config import SFTConfig
    from midtrain.train.config import TrainConfig


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str  # train | sft | mixture | protocol | ...
    fn: Callable[[], Config]
    doc: str

    def build(self, overrides: list[str] | None = None) -> Config:
        overrides = list(overrides or [])
        return self.fn().apply_overrides(overrides).follow_overrides(overrides)


_REGISTRY: dict[str, Recipe] = {}
C = TypeVar("C", bound=Config)


def recipe(kind: str, name: str | None = None) -> Callable[[Callable[[], C]], Callable[[], C]]:
    """Register a recipe function under its name (or ``name``)."""

    def deco(fn: Callable[[], C]) -> Callable[[], C]:
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


def resolve_config(name: str, cls: type[C], kind: str, overrides: list[str] | None = None, validate: bool = True) -> C:
    """The ``cls`` config NAME stands for, overrides applied (and validated unless ``validate`` is False).

    NAME is a registered recipe or a YAML file (``*.yaml``/``*.yml`` or an existing file: a run's saved
    config.yaml). A recipe that returns another kind of config is refused, naming both kinds.
    """
    if name.endswith((".yaml", ".yml")) or Path(name).is_file():
        path = Path(name)
        if not path.is_file():
            raise ConfigError(f"config file {name} does not exist")
        cfg = cls.from_yaml(path)
    else:
        r = get_recipe(name)
        built = r.fn()
        if not isinstance(built, cls):
            raise ConfigError(
                f"recipe '{name}' is a recipe of kind {r.kind}, not {kind} "
                f"(`midtrain recipes --kind {kind}` lists those)"
            )
        cfg = built
    overrides = list(overrides or [])
    cfg = cfg.apply_overrides(overrides).follow_overrides(overrides)
    return cfg.validate() if validate else cfg


def load_train_config(name: str, overrides: list[str] | None = None) -> TrainConfig:
    """The TrainConfig NAME stands for (a train recipe, or a run's config.yaml to replay), overrides applied,
    validated. A config.yaml is read strictly first: an empty or cut one is refused, never replayed as defaults."""

    if Path(name).is_file():
        read_run_config(name)
    return resolve_config(name, TrainConfig, "train", overrides)


def resolve_probe(protocol: ProtocolConfig) -> SFTConfig:
    """The probe a protocol gives every checkpoint: its ``sft_recipe`` with its ``sft_overrides``, validated."""

    return resolve_config(protocol.sft_recipe, SFTConfig, "sft", list(protocol.sft_overrides))
