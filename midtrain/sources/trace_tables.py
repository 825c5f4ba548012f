"""Agent trajectories from public dataset tables (Parquet / JSONL, local or fsspec URLs), one per row.

Rows in the published schemas are parsed by the trace reader's own :func:`parse_trajectory` and rendered by
:class:`TraceReader` (chat template or plain, ``loss_spans``, ``only_resolved``):

- SWE-bench/SWE-smith-trajectories: ``messages`` (role/content; a JSON string in the Parquet files is
  decoded), ``instance_id``, ``resolved``, ``model``, ``patch``;
- nebius/SWE-agent-trajectories: ``trajectory`` of role (system/user/ai) + ``text``, ``target`` (resolved),
  ``exit_status``, ``generated_patch``, ``model_name``, ``instance_id``;
- nebius/SWE-rebench-openhands-trajectories, nvidia/SWE-Zero-openhands-trajectories: ``trajectory`` of
  OpenAI-style messages with ``tool_calls``, ``tools``, ``repo``, ``license``, ``resolved``/``exit_status``,
  ``model_patch``;
- R2E-Gym / DeepSWE SFT sets: ``messages`` (role/content).

Other column names: ``traces.columns.<field>=<column>`` for field in messages, trajectory, tools,
instance_id, resolved, exit_status, repo, license. Parquet stores a list of structs with every key of every
message, absent ones as null: nulls are dropped before parsing, so ``text`` is not hidden by a null ``content``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from datatrove.data import Document

from midtrain.sources.repo_tables import TableInputFields
from midtrain.sources.tables import json_field, readable_rows, table_units
from midtrain.sources.traces import TraceFormatError, TraceReader, TracesConfig, parse_trajectory

FIELDS = ("messages", "trajectory", "tools", "instance_id", "resolved", "exit_status", "repo", "license")


@dataclass
class TracesInputConfig(TracesConfig, TableInputFields):
    """Trace documents from trajectory files or trajectory tables."""

    def check(self) -> None:
        super().check()
        self.check_table_fields(FIELDS)


def _clean_message(m: Any) -> Any:
    if not isinstance(m, dict):
        return m
    out = {k: v for k, v in m.items() if v is not None}
    if "tool_calls" in out:
        out["tool_calls"] = json_field(out["tool_calls"])
    return out


def trajectory_record(row: dict, columns: dict[str, str]) -> dict:
    """A table row as the record :func:`parse_trajectory` reads: mapped columns, JSON strings decoded."""
    rec = dict(row)
    for field, column in columns.items():
        rec[field] = row.get(column)
    for key in ("messages", "trajectory", "history", "tools"):
        if key in rec:
            value = json_field(rec[key])
            rec[key] = [_clean_message(m) for m in value] if isinstance(value, list) else value
    if rec.get("trajectory") is None:
        rec.pop("trajectory", None)
    return rec


class TraceTableReader(TraceReader):
    """datatrove reader over trajectory tables (sharded by table file)."""

    name = "🤖 agent traces from tables"
    config_class = TracesInputConfig
    cfg: TracesInputConfig

    def units(self) -> list[tuple[str, Any]]:
        return table_units(self.inputs)

    def unit_path(self, unit: Any) -> Path | None:
        return None

    def read_unit(self, unit: Any, origin: str) -> Iterator[Document]:
        folder, rel = unit
        prefix = folder.resolve_paths(rel) if rel is not None else ""
        for where, row in readable_rows(self, unit, origin, "records"):
            try:
                traj = parse_trajectory(trajectory_record(row, self.cfg.columns) if isinstance(row, dict) else row)
            except TraceFormatError as e:
                self.error("bad_trajectory", where, str(e), origin)
                continue
            doc = self._document(traj, Path(rel).name + where[len(prefix):])
            if doc is not None:
                yield doc
