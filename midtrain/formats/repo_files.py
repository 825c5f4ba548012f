"""What a file of a repository is, from its path alone: library code, a test, or an example.

Shared by the repository reader's file ordering (tests and examples after the code they exercise), the
secrets scan (test fixtures hold fake keys) and the data card's composition counts.
"""

from __future__ import annotations

import re

_TEST_DIRS = {"test", "tests", "testing", "__tests__", "spec", "specs", "test_utils", "testutils"}
_EXAMPLE_DIRS = {
    "example",
    "examples",
    "sample",
    "samples",
    "demo",
    "demos",
    "tutorial",
    "tutorials",
    "benchmark",
    "benchmarks",
    "bench",
    "docs_src",
    "cookbook",
}
_TEST_NAME = re.compile(
    r"^(?:test_.*|.*_test|.*_tests|conftest|.*\.(?:test|spec))\.\w+$"
    r"|^.*Tests?\.(?:java|kt|cs|swift)$"
)


def file_group(path: str) -> int:
    """0 library code (and anything else), 1 tests, 2 examples/benchmarks: the order of the groups."""
    parts = path.split("/")
    dirs = {p.lower() for p in parts[:-1]}
    if dirs & _TEST_DIRS or _TEST_NAME.match(parts[-1]):
        return 1
    if dirs & _EXAMPLE_DIRS:
        return 2
    return 0
