"""The sources `midtrain prep` can run, each bound once to its traits and its reader config.

A source's traits (midtrain.formats.source_specs) say how curation, packing, sweeps and plans treat its
documents; here its prep name is bound to the config its reader takes (``NAME.field=...`` overrides, `midtrain
config prep NAME`, docs/reference.md). Its pipeline file is ``data_prep/NAME.py`` (midtrain.sources.prep loads
it by name).
"""

from __future__ import annotations

from dataclasses import dataclass

from midtrain.formats.source_specs import SOURCE_TRAITS, SourceTraits
from midtrain.sources.buildlogs import BuildLogsConfig
from midtrain.sources.commit_tables import CommitsInputConfig
from midtrain.sources.common import ReaderConfig
from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.repo_tables import ReposInputConfig
from midtrain.sources.trace_tables import TracesInputConfig


@dataclass(frozen=True)
class SourceSpec:
    traits: SourceTraits
    config: type[ReaderConfig]  # the reader's config (prep resolves the table form where a source has one)

    @property
    def name(self) -> str:
        return self.traits.name


def _bind(configs: dict[str, type[ReaderConfig]]) -> dict[str, SourceSpec]:
    if set(configs) != set(SOURCE_TRAITS):  # a source registered on one side only would half work
        raise RuntimeError(f"sources without both traits and a reader config: {set(configs) ^ set(SOURCE_TRAITS)}")
    return {name: SourceSpec(SOURCE_TRAITS[name], cfg) for name, cfg in configs.items()}


SOURCE_SPECS: dict[str, SourceSpec] = _bind(
    {
        "repos": ReposInputConfig,
        "commits": CommitsInputConfig,
        "pulls": PullsConfig,
        "buildlogs": BuildLogsConfig,
        "traces": TracesInputConfig,
    }
)
