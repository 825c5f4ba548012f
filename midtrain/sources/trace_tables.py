"""Agent trajectories from public dataset tables (Parquet / JSONL, local or fsspec URLs), one per row.

Rows in the published schemas are parsed by the trace reader's own :func:`parse_trajectory` and rendered by
:class:`TraceReader` (chat template or plain, ``loss_spans``, ``only_resolved``):

- SWE-bench/SWE-smith-trajectories: ``messages`` (role/content; a JSON string in the Parquet files is
  decoded; a truncated one is reported as ``malformed_json``), ``instance_id``, ``resolved``, ``model``,
  ``patch``;
- nebius/SWE-agent-trajectories: ``trajectory`` of role (system/user/ai) + ``text`` / ``system_prompt`` +
  ``mask``, ``target`` (resolved), ``exit_status``, ``generated_patch``, ``model_name``, ``instance_id``;
- nebius/SWE-rebench-openhands-trajectories, nvidia/SWE-Zero-openhands-trajectories: ``trajectory`` of
  OpenAI-style messages with ``tool_calls``, ``tools``, ``repo``, ``license``, ``resolved``/``exit_status``,
  ``model_patch``;
- nvidia/Open-SWE-Traces: ``messages``, ``tools`` (a list of JSON strings), ``resolved`` (1, 0, -1 = not
  evaluated: unknown), ``repo``, ``license``;
- R2E-Gym / DeepSWE SFT sets: ``messages`` (role/content).

Other column names: ``traces.columns.<field>=<column>`` for field in messages, trajectory, tools,
instance_id, resolved, exit_status, repo, license. Parquet stores a list of structs with every key of every
struct in the column (Arrow unifies them across rows), absent ones as null: the nulls are dropped before
parsing, so ``text`` is not hidden by a null ``content`` and a tool schema is the producer's JSON again (no
``"enum": null`` or the other tools' parameters as nulls). A row that fails to parse or render is counted
with its reason and costs no other row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from datatrove.data import Document

from midtrain.sources.repo_tables import TableInputFields
from midtrain.sources.tables import TableUnit, readable_rows, schema_problem, table_units
from midtrain.sources.traces import TraceReader, TracesConfig, parse_trajectory

FIELDS = ("messages", "trajectory", "tools", "instance_id", "resolved", "exit_status", "repo", "license")
# a row needs one message list column
REQUIRED = [("messages",), ("trajectory",), ("history",)]
ALIASES = {f: (f,) for f in FIELDS + ("history",)}


class MalformedColumn(ValueError):
    """A column that holds JSON text which does not parse (e.g. a truncated ``messages`` string)."""


@dataclass
class TracesInputConfig(TracesConfig, TableInputFields):
    """Trace documents from trajectory files or trajectory tables."""

    def check(self) -> None:
        super().check()
        self.check_table_fields(FIELDS)


def strip_nulls(value: Any) -> Any:
    """Nested structs without their null members: the keys Arrow added when it unified the structs of a
    column across rows (every tool gets every other tool's parameters, ``"enum": null`` ...)."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def _decoded(key: str, value: Any) -> Any:
    """A nested column as a Python object: some datasets store lists of messages/tools as JSON strings."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise MalformedColumn(f"column {key!r} holds malformed JSON ({len(value)} characters): {e}") from None
    return value


def _clean_message(m: Any) -> Any:
    if not isinstance(m, dict):
        return m
    out = {k: v for k, v in m.items() if v is not None}
    if "tool_calls" in out:
        out["tool_calls"] = strip_nulls(_decoded("tool_calls", out["tool_calls"]))
    return out


def trajectory_record(row: dict, columns: dict[str, str]) -> dict:
    """A table row as the record :func:`parse_trajectory` reads: mapped columns, JSON strings decoded, Arrow's
    null members dropped. Raises MalformedColumn for a JSON column that does not parse."""
    rec = dict(row)
    for field, column in columns.items():
        rec[field] = row.get(column)
    for key in ("messages", "trajectory", "history"):
        if key in rec:
            value = _decoded(key, rec[key])
            rec[key] = [_clean_message(m) for m in value] if isinstance(value, list) else value
    if "tools" in rec:
        value = _decoded("tools", rec["tools"])
        rec["tools"] = strip_nulls(value) if isinstance(value, list) else value
    if rec.get("trajectory") is None:
        rec.pop("trajectory", None)
    return rec


class TraceTableReader(TraceReader):
    """datatrove reader over trajectory tables (sharded by table file)."""

    name = "🤖 agent traces from tables"
    config_class = TracesInputConfig
    cfg: TracesInputConfig

    def units(self) -> list[tuple[str, Any]]:
        return table_units(self.inputs, self.cfg)

    def unit_path(self, unit: Any) -> Path | None:
        return None

    # table units replace the file reader's (path, rel) units: every unit method is overridden together
    def read_unit(self, unit: TableUnit, origin: str) -> Iterator[Document]:  # type: ignore[override]
        prefix = unit.folder.resolve_paths(unit.rel) if unit.rel is not None else ""
        first = True
        for where, row in readable_rows(self, unit, origin, "records"):
            if first and isinstance(row, dict):
                first = False
                problem = schema_problem("traces", row, REQUIRED, self.cfg.columns, ALIASES)
                if problem:  # every row of the file has these columns: one error naming the file
                    self.error("schema_mismatch", prefix, f"input {origin}: {problem}", origin)
                    return
            try:
                record = trajectory_record(row, self.cfg.columns) if isinstance(row, dict) else row
            except MalformedColumn as e:
                self.error("malformed_json", where, str(e), origin)
                continue
            name = Path(unit.rel).name if unit.rel is not None else ""  # rows come only from a unit with a rel
            doc = self._record_document(partial(parse_trajectory, record), name + where[len(prefix) :], where, origin)
            if doc is not None:
                yield doc
