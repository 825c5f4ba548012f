"""Shared test setup: markers that skip cleanly where the machine cannot run them."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2-core CI machine: keep torch from oversubscribing


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A run that collects nothing must fail loudly, not pass (pytest exits 5; make it 1 with a message).
    if session.testscollected == 0 and exitstatus == 5:
        print("\nERROR: no tests were collected")
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    # The documented-examples test is most of the suite's time: show which examples cost it, slowest first,
    # so a CI log says where to cut without rerunning with -s.
    examples = sys.modules.get("documented_examples")  # imported only where that test was collected
    times = config.stash.get(examples.EXAMPLE_SECONDS, None) if examples else None
    if not times:
        return
    terminalreporter.section(f"documented examples: {sum(t for t, _ in times):.0f} s in {len(times)} runs, "
                             "slowest 15")
    for seconds, cmd in sorted(times, reverse=True)[:15]:
        terminalreporter.write_line(f"{seconds:7.1f} s  {cmd[:150]}")


# tests/data holds fixture repositories (with their own tests/ folders) that are inputs, not tests of ours.
collect_ignore_glob = ["data/*"]
