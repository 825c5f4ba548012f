"""Shared test setup: markers that skip cleanly where the machine cannot run them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import pytest

REPO = Path(__file__).resolve().parents[1]
# Not the checkout's content: the environment, git's own files, caches Python and pytest keep beside the code.
_NOT_CHECKOUT = {".venv", ".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_SNAPSHOT = pytest.StashKey[dict]()

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2-core CI machine: keep torch from oversubscribing


def checkout_snapshot(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file under the checkout: tracked, untracked and ignored alike (a
    user's .demo/, runs/, out/), less _NOT_CHECKOUT and ``skip`` (pytest's own temporary directory)."""
    skip_s = {str(p) for p in skip}
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _NOT_CHECKOUT and os.path.join(dirpath, d) not in skip_s]
        for n in names:
            path = os.path.join(dirpath, n)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return out


def checkout_changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """'added/removed/changed PATH' lines, sorted."""
    lines = [f"added   {p}" for p in after.keys() - before.keys()]
    lines += [f"removed {p}" for p in before.keys() - after.keys()]
    lines += [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(lines, key=lambda line: line[8:])


def _checks_checkout(config: pytest.Config) -> bool:
    # once per run: in the controller under xdist (workers share its checkout); off with
    # MIDTRAIN_CHECKOUT_CHECK=0 for a working tree that people edit while it runs
    return not hasattr(config, "workerinput") and os.environ.get("MIDTRAIN_CHECKOUT_CHECK", "1") != "0"


def _basetemp(config: pytest.Config) -> tuple[Path, ...]:
    base = config.getoption("basetemp", None)
    return (Path(base).resolve(),) if base else ()


def pytest_configure(config: pytest.Config) -> None:
    if _checks_checkout(config):
        config.stash[_SNAPSHOT] = checkout_snapshot(REPO, _basetemp(config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The Slurm tests (one work unit, about 20 minutes of mostly waiting on the queue: the longest) first, then
    # the `heavy` tests (minutes each), in their order: xdist hands the first work units to different workers
    # (with --no-loadscope-reorder, see the Makefile), so the longest run side by side from the start. Started
    # after a heavy group, the Slurm unit ran last and alone, 10 minutes past the others.
    def rank(item: pytest.Item) -> int:
        return 0 if xdist_work_unit(item.nodeid) == "slurm_cluster" else 1 if "heavy" in item.keywords else 2

    items.sort(key=rank)  # stable: collection order within each rank
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - torch missing or broken means no GPU either
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def xdist_work_unit(nodeid: str) -> str:
    """The unit of tests one xdist worker runs together (see pytest_xdist_make_scheduler)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/slurm/"):
        return "slurm_cluster"  # the machine's one test cluster, held by one worker's session
    if path == "tests/test_documented_examples.py":
        return nodeid  # each example group on its own, so the heavy ones run side by side
    return path  # a module's tests together: its module-scoped fixtures (trainings, packs) are built once


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    # --dist loadgroup's own grouping does not work with pytest 9.2 (xdist 3.8 tags item._nodeid, which pytest
    # no longer reads), so its tests were spread test by test: a module's fixtures were built once per worker
    # and two workers' Slurm tests shared the cluster. This groups by xdist_work_unit from the node ids instead.
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class _ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_work_unit(nodeid)

    return _ByUnit(config, log)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A run that collects nothing must fail loudly, not pass (pytest exits 5; make it 1 with a message).
    if session.testscollected == 0 and exitstatus == 5:
        print("\nERROR: no tests were collected")
        session.exitstatus = 1
    # Hermetic: tests write only under pytest's temporary directories, never into the checkout.
    before = session.config.stash.get(_SNAPSHOT, None)
    if before is not None:
        changes = checkout_changes(before, checkout_snapshot(REPO, _basetemp(session.config)))
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        say = tr.write_line if tr else print
        if changes:
            shown = "\n  ".join(changes[:50]) + (f"\n  ... and {len(changes) - 50} more" if len(changes) > 50 else "")
            say(
                f"\nERROR: the test run changed {len(changes)} file(s) in the checkout {REPO} (tests must "
                f"write only under pytest's tmp_path; MIDTRAIN_CHECKOUT_CHECK=0 turns this off while people edit the "
                f"tree):\n  {shown}"
            )
            session.exitstatus = 1
        else:
            say(f"checkout check: no file under {REPO} changed during the run ({len(before)} files)")


_EXAMPLE_TIMES: list[tuple[float, float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # documented examples' times (tests/test_documented_examples.py), from any xdist worker
    if report.when == "call":
        for key, value in report.user_properties:
            if key == "documented_example_times":
                # pytest types user properties as object; the test stores (wall, cpu, command) triples
                _EXAMPLE_TIMES.extend((w, c, cmd) for w, c, cmd in cast("list[tuple[float, float, str]]", value))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    # The documented examples are much of the suite's time: show which examples cost it, slowest first (wall
    # time, and CPU time, which a loaded machine does not inflate), so a CI log says where to cut.
    if not _EXAMPLE_TIMES:
        return
    wall, cpu = sum(t[0] for t in _EXAMPLE_TIMES), sum(t[1] for t in _EXAMPLE_TIMES)
    terminalreporter.section(
        f"documented examples: {wall:.0f} s wall, {cpu:.0f} s CPU in {len(_EXAMPLE_TIMES)} runs, slowest 20"
    )
    for seconds, cpu_s, cmd in sorted(_EXAMPLE_TIMES, reverse=True)[:20]:
        terminalreporter.write_line(f"{seconds:7.1f} s {cpu_s:7.1f} s CPU  {cmd[:140]}")


# tests/data holds fixture repositories (with their own tests/ folders) that are inputs, not tests of ours.
collect_ignore_glob = ["data/*"]
