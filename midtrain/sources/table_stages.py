"""The source stages of `midtrain prep` when the inputs are tables (see :mod:`midtrain.sources.tables`).

repos and commits group rows by repository across tasks: a ``source_rows`` stage partitions rows into
buckets under ``DIR/rows/``, then the ``source`` stage assembles documents bucket by bucket. traces read
one trajectory per row, so their ``source`` stage reads the table files directly. Every other input kind
(git repositories, trajectory and log files) keeps the single reader stage of ``data_prep/<source>.py``.
"""

from __future__ import annotations

from pathlib import Path

from midtrain.sources.commit_tables import CommitsInputConfig, commit_table_stages
from midtrain.sources.common import ReaderConfig
from midtrain.sources.pull_stages import pull_join_stages
from midtrain.sources.repo_tables import ReposInputConfig, repo_table_stages
from midtrain.sources.tables import is_table_input
from midtrain.sources.trace_tables import TracesInputConfig, TraceTableReader

TABLE_SOURCES = ("repos", "commits", "traces")


def uses_tables(source: str, inputs: list[str], cfg: ReaderConfig) -> bool:
    """True when the source reads its inputs as tables: told so, or (auto) every input is a URL/table file."""
    fmt = getattr(cfg, "input_format", "files")
    if source not in TABLE_SOURCES or fmt == "files":
        return False
    if source == "traces":  # the trace file reader reads local .json/.jsonl itself: tables are URLs and Parquet
        return fmt == "table" or all(is_table_input(i, (".parquet",)) for i in inputs)
    return fmt == "table" or all(is_table_input(i) for i in inputs)


def table_source_stages(
    source: str, inputs: list[str], cfg: ReaderConfig, output: Path, tasks: int
) -> list[tuple[str, list, int]] | None:
    """[(stage name, pipeline, tasks)] reading table inputs, or None when the inputs are not tables."""
    if source == "pulls":  # records joined with their repositories' clones: partitioned by repository
        return pull_join_stages(inputs, cfg, output, tasks)  # type: ignore[arg-type]
    if not uses_tables(source, inputs, cfg):
        return None
    from datatrove.pipeline.writers import JsonlWriter

    raw, report = str(output / "raw"), str(output / "logs" / "source" / "reports")
    excluded = str(output / "excluded" / "source")
    if source == "traces":
        assert isinstance(cfg, TracesInputConfig)  # prep resolves the table form (its SourceSpec)
        return [
            (
                "source",
                [
                    TraceTableReader(inputs, cfg, report_dir=report, exclusion_dir=excluded),
                    JsonlWriter(raw, output_filename="${rank}.jsonl"),
                ],
                tasks,
            )
        ]
    buckets = getattr(cfg, "buckets", 0) or tasks
    rows = str(output / "rows")
    if source == "repos":
        assert isinstance(cfg, ReposInputConfig)
        partition, assemble = repo_table_stages(inputs, cfg, rows, buckets, raw, report, excluded)
    else:
        assert isinstance(cfg, CommitsInputConfig)
        partition, assemble = commit_table_stages(inputs, cfg, rows, buckets, raw, report, excluded)
    return [("source_rows", partition, tasks), ("source", assemble, min(tasks, buckets))]
