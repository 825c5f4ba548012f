"""`midtrain prep pulls` with ``pulls.repos``: the join with the repositories as stages partitioned by repository.

Pull-request records of one repository are scattered over the input files; reading them file by file would
have every task open every clone. As for the table sources (:mod:`midtrain.sources.buckets`), a partition
stage writes each record to the bucket of its repository, then each assembling task renders its buckets'
repositories one at a time, so a task opens only its own repositories' clones and a clone's identity (root
commits, remote) is read once per task. The documents do not depend on the number of tasks.
Git inputs (their merge commits are the PRs) keep the single reader stage: the input is its own clone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datatrove.data import Document

from midtrain.sources.buckets import BucketAssembler, bucket_of, grouped, grouping_stages, iter_bucket
from midtrain.sources.common import expand_inputs
from midtrain.sources.git import GitError, is_git_repo
from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pulls import PullReader


def _repo_of(pr: dict) -> str:
    return str(pr.get("repo") or ((pr.get("base") or {}).get("repo") or {}).get("full_name") or "")


class PullRowPartitioner(PullReader):
    """Partition stage: every readable record -> a row (the record as JSON) in its repository's bucket."""

    name = "🪣 partition pull requests"
    report_name = "partition-{rank:05d}.json"  # beside the assembling stage's reports, under its own name

    def __init__(self, inputs: list[str], cfg: PullsConfig, buckets: int, report_dir: str | None = None):
        super().__init__(inputs, cfg, report_dir)
        self.buckets = buckets

    def render(self, pr: dict, where: str, clone: Path | None = None) -> Document | None:
        repo = _repo_of(pr)
        return Document(
            text=json.dumps(pr, ensure_ascii=False, default=str),
            id=where,
            metadata={"group": repo, "bucket": bucket_of(repo, self.buckets), "where": where},
        )


class PullAssembler(BucketAssembler, PullReader):
    """Assemble stage: each bucket's records, repository by repository, rendered with their clone."""

    name = "🔀 pull requests by repository"

    def read_unit(self, unit: Any, origin: str) -> Iterator[Document]:
        for _repo, rows in grouped(iter_bucket(self.rows_dir, unit)):
            for row in sorted(rows, key=lambda r: r["metadata"]["where"]):
                self.stat_update("records")
                where = row["metadata"]["where"]
                try:
                    doc = self.render(json.loads(row["text"]), where)
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    self.error("bad_record", where, f"{type(e).__name__}: {e}")
                    continue
                except GitError as e:
                    self.error("bad_git_repository", where, str(e))
                    continue
                if doc is not None:
                    yield doc


def pull_join_stages(
    inputs: list[str], cfg: PullsConfig, output: Path, tasks: int
) -> list[tuple[str, list, int]] | None:
    """[(stage name, pipeline, tasks)] for record inputs joined with ``pulls.repos``; None otherwise."""
    if not cfg.repos or any(is_git_repo(p) for p in expand_inputs(inputs)):
        return None
    raw, report = str(output / "raw"), str(output / "logs" / "source" / "reports")
    rows = str(output / "rows")
    partition, assemble = grouping_stages(
        PullRowPartitioner(inputs, cfg, buckets=tasks, report_dir=report),
        PullAssembler(rows, tasks, cfg, report_dir=report, exclusion_dir=str(output / "excluded" / "source")),
        rows,
        raw,
    )
    return [("source_rows", partition, tasks), ("source", assemble, tasks)]
