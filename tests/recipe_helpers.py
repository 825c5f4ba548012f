"""Recipes built as the kind of config a test reads: the registry's ``Recipe.build()`` returns the base Config."""

from __future__ import annotations

from midtrain.train.config import TrainConfig
from recipes import resolve_config


def train_recipe(name: str, overrides: list[str] | None = None) -> TrainConfig:
    """Train recipe NAME with OVERRIDES applied and not validated, as ``get_recipe(name).build(overrides)``;
    a recipe of another kind is refused."""
    return resolve_config(name, TrainConfig, "train", overrides, validate=False)
