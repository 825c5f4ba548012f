"""The stage runner: local chains run in order and once; a dry run names every stage; bad executors refused;
what the stages counted summed over tasks and stages."""

from __future__ import annotations

from pathlib import Path

import pytest
from datatrove.pipeline.base import PipelineStep

from midtrain.runner import StageChain, stage_stats, step_totals


class AppendLine(PipelineStep):
    """Appends its word to a file, so the test sees which stages ran and in which order."""

    name = "append"

    def __init__(self, path: str, word: str) -> None:
        super().__init__()
        self.path, self.word = path, word

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        with open(self.path, "a") as f:
            f.write(f"{self.word}\n")
        return
        yield


def test_local_chain_runs_added_stages_in_order_and_once(tmp_path):
    out = tmp_path / "order.txt"
    chain = StageChain("local", label="test")
    chain.add("first", [AppendLine(str(out), "first")], 1, str(tmp_path / "logs" / "first"), "first")
    chain.run()
    chain.add("second", [AppendLine(str(out), "second")], 1, str(tmp_path / "logs" / "second"), "second")
    chain.run()
    chain.run()  # nothing new: nothing runs again
    assert out.read_text().split() == ["first", "second"]
    again = StageChain("local")
    again.add("first", [AppendLine(str(out), "first")], 1, str(tmp_path / "logs" / "first"), "first")
    again.run()  # datatrove's completion markers: a rerun skips the finished task
    assert out.read_text().split() == ["first", "second"]


class CountRank(PipelineStep):
    """Counts its task's rank plus one as ``seen`` (and one ``tasks``): totals tell which tasks were summed."""

    name = "🔢 count"
    type = "🔢 - TEST"

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        self.stat_update("seen", value=rank + 1)
        self.stat_update("tasks")
        return
        yield


def test_stats_are_summed_over_a_stages_tasks_and_over_stages_by_step(tmp_path: Path):
    chain = StageChain("local", workers=2)
    for name, tasks in (("a", 3), ("b", 2)):
        chain.add(name, [CountRank()], tasks, str(tmp_path / "logs" / name), name)
    chain.run()
    a = stage_stats(tmp_path / "logs" / "a")
    assert [s["name"] for s in a] == ["🔢 - TEST: 🔢 count"] and step_totals([a]) == {"count": {"seen": 6, "tasks": 3}}
    assert stage_stats(tmp_path / "logs" / "never_ran") == []
    # the two stages' steps share a label (emoji dropped): their counts add up
    totals = step_totals(stage_stats(tmp_path / "logs" / n) for n in ("a", "b"))
    assert totals == {"count": {"seen": 6 + 3, "tasks": 3 + 2}}


def test_dry_run_describes_each_stage_and_runs_nothing(tmp_path):
    out = tmp_path / "order.txt"
    chain = StageChain("local")
    for name in ("a", "b"):
        chain.add(name, [AppendLine(str(out), name)], 2, str(tmp_path / "logs" / name), name)
    scripts = chain.scripts()
    assert list(scripts) == ["a", "b"] and "2 tasks" in scripts["a"] and str(tmp_path / "logs" / "b") in scripts["b"]
    assert not out.exists()


def test_unknown_executor_is_refused():
    with pytest.raises(ValueError, match="executor"):
        StageChain("kubernetes")


def test_slurm_logs_of_a_stage_in_object_storage_go_to_a_filesystem(tmp_path):
    """sbatch cannot write its log files into a bucket: they go to datatrove's local default instead."""
    from midtrain.launch.site import SiteConfig

    chain = StageChain("slurm", SiteConfig(partition="cpu"), label="test")
    ex = chain.add(
        "a",
        [AppendLine(str(tmp_path / "x"), "a")],
        2,
        "s3://bucket/out/logs/a",
        "a",
        slurm_logs_dir="s3://bucket/out/logs/slurm/a",
    )
    assert ex.slurm_logs_folder.startswith("slurm_logs/a/")
    ex = chain.add(
        "b",
        [AppendLine(str(tmp_path / "x"), "b")],
        2,
        str(tmp_path / "logs" / "b"),
        "b",
        slurm_logs_dir=str(tmp_path / "logs" / "slurm" / "b"),
    )
    assert ex.slurm_logs_folder == str(tmp_path / "logs" / "slurm" / "b")
