"""Pull requests of a git history: every PR once (merges into any branch, squash merges), logins scrubbed,
and dedup on the PR's own text (the files read at the base commit left out of its signature)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from curate_helpers import count, curate, stdlib, write_raw
from sources_fixtures import commit, git, make_repo, run_reader

from midtrain.curate.stages import CurationConfig
from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pull_context import base_context, history_pulls
from midtrain.sources.pulls import PullReader

ALICE, BOB, CAROL = (
    ("Alice Walker", "alice@example.org"),
    ("Bob Stone", "bob@example.org"),
    ("Carol Diaz", "carol@example.org"),
)
CORE = stdlib("textwrap.py")  # a large real module every PR reads whole before its edit


def build_history(root: Path) -> Path:
    """main and a maintenance branch 8.1.x: PR #1 merged into main through the merge button (an empty message
    body, from alice-w's fork branch ``alice-w-patch-1``); PR #2 merged into 8.1.x, which reaches main through
    ``Merge branch '8.1.x'``; PR #3 squash-merged into main and backported to 8.1.x under the same title."""
    repo = make_repo(root, {"lib/core.py": CORE, "README.md": "# lib\n"})
    git(repo, "checkout", "-q", "-b", "8.1.x")
    git(repo, "checkout", "-q", "main")
    git(repo, "checkout", "-q", "-b", "alice-w-patch-1")
    commit(
        repo,
        {"lib/core.py": CORE.replace("def dedent(text):", "def dedent(text: str) -> str:")},
        "Type dedent's argument and result",
        author=ALICE,
    )
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "alice-w-patch-1", "-m", "Merge pull request #1 from alice-w/alice-w-patch-1")
    git(repo, "checkout", "-q", "-b", "fix-width", "8.1.x")
    commit(
        repo,
        {
            "lib/core.py": CORE.replace(
                "        if self.width <= 0:", "        if self.width is None or self.width <= 0:"
            )
        },
        "Refuse a missing width",
        author=BOB,
    )
    git(repo, "checkout", "-q", "8.1.x")
    git(
        repo,
        "merge",
        "-q",
        "--no-ff",
        "fix-width",
        "-m",
        "Merge pull request #2 from bobstone/fix-width\n\nRefuse a missing width\n\nAs @dave-x asked in the forum.",
    )
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "8.1.x", "-m", "Merge branch '8.1.x'")
    core_now = (repo / "lib" / "core.py").read_text()
    commit(
        repo,
        {
            "lib/core.py": core_now.replace(
                "def indent(text, prefix, predicate=None):", "def indent(text, prefix, predicate=None):  # noqa: D401"
            )
        },
        "Mark indent's docstring style (#3)\n\nThanks @eve-q for the report.",
        author=CAROL,
    )
    git(repo, "checkout", "-q", "8.1.x")
    commit(repo, {"NOTES.md": "indent\n"}, "Mark indent's docstring style (#3)", author=CAROL)  # a backport
    git(repo, "checkout", "-q", "main")
    return repo


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    return build_history(tmp_path_factory.mktemp("history") / "lib")


def test_every_pull_request_of_any_branch_found_once_by_kind(history):
    found: dict[str, int] = {}
    records = [rec for _, rec in history_pulls(history, "acme/lib", found)]
    assert [(r["number"], r["found_as"]) for r in records] == [(1, "merge"), (2, "merge"), (3, "squash")]
    assert found == {"merge": 2, "squash": 1, "repeated_number": 1}  # the backport names #3 again
    pr2 = records[1]  # merged into the maintenance branch: its base is where it left 8.1.x
    assert pr2["title"] == "Refuse a missing width" and [f["filename"] for f in pr2["files"]] == ["lib/core.py"]
    assert records[0]["title"] == "Type dedent's argument and result"  # empty merge body: the head's subject
    reader = PullReader([str(history)], PullsConfig(context="files"))
    docs = run_reader(reader)
    assert [d.id for d in docs] == ["pr:lib#1", "pr:lib#2", "pr:lib#3"]
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["pulls_found/merge"] == 2 and stats["pulls_found/squash"] == 1
    assert stats["pulls_found/repeated_number"] == 1


def test_logins_scrubbed_from_titles_branch_names_and_mentions(history):
    docs = run_reader(PullReader([str(history)], PullsConfig(context="none")))
    text = "\n".join(d.text for d in docs)
    for ident in ("alice-w", "bobstone", "dave-x", "eve-q", "Alice", "Bob", "Carol", "example.org"):
        assert ident not in text, ident
    assert "Merge pull request" not in text and "(main <- user_1-patch-1)" in docs[0].text
    assert "As user_2 asked in the forum." in docs[1].text  # a non-participant: a pseudonym of their own
    assert "(no description)" not in text and "user_1 opened this pull request.\n" in docs[0].text


def test_dedup_compares_the_pull_requests_own_text(history, tmp_path):
    """PRs #1 and #2 read the same 19 KB module before small, different edits: both kept (compared whole,
    MinHash would call them near duplicates); a second copy of PR #1 is an exact duplicate. #3 reads it as
    windows (pulls.whole_file_repeats=2)."""
    docs = run_reader(PullReader([str(history)], PullsConfig(context="files")))
    assert all(d.metadata["context_bytes"] > 15_000 for d in docs[:2])
    assert docs[2].metadata["context_bytes"] < 15_000  # shown whole twice already: windows around #3's edit
    rows = [{"text": d.text, "id": d.id, "metadata": d.metadata} for d in docs]
    write_raw(tmp_path / "raw", rows, [json.loads(json.dumps(rows[0]))])
    out, counts, _ = curate(tmp_path, CurationConfig(), source="pulls")
    assert sorted(d["id"] for d in out) == ["pr:lib#1", "pr:lib#2", "pr:lib#3"]
    assert count(counts, "dedup", "dropped_exact_duplicate") == 1
    assert count(counts, "dedup", "dropped_near_duplicate") == 0


def test_context_by_relevance_windows_around_the_edit_and_changelogs_last(tmp_path):
    big = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(1500))  # ~35 KB: over the budget
    repo = make_repo(
        tmp_path / "r",
        {
            "CHANGES.rst": "Version 1\n" + "- a change\n" * 800,
            "lib/big.py": big,
            "lib/small.py": "def g(x):\n    return x\n",
            "tests/test_small.py": "from lib.small import g\n\n\ndef test_g():\n    assert g(1) == 1\n",
        },
    )
    base = git(repo, "rev-parse", "HEAD").strip()
    changed = ["CHANGES.rst", "tests/test_small.py", "lib/big.py", "lib/small.py"]  # diff (alphabetical) order
    budget = PullsConfig(seq_length=4096).context_budget()
    assert budget == 2048 and PullsConfig(context_tokens=100, seq_length=4096).context_budget() == 100
    read, skipped = base_context(
        repo, base, changed, "files", budget, PullsConfig().read_header, hunks={"lib/big.py": [(3001, 3003)]}
    )
    assert [r.path for r in read] == ["lib/big.py", "lib/small.py", "tests/test_small.py"]  # source, tests
    assert skipped == {"context_windowed": 1, "context_budget": 1}  # the changelog, last, did not fit
    window = read[0].block
    assert "; lines 2961-3043 of 4501)]" in window.splitlines()[1]
    shown = window.split("]\n", 1)[1].rstrip("\n").split("\n")
    assert shown[0] == shown[-1] == "..." and shown[1:-1] == big.split("\n")[2960:3043]  # the base's lines
    roomy, _ = base_context(repo, base, changed, "files", 40_000, PullsConfig().read_header)
    assert [r.path for r in roomy][-1] == "CHANGES.rst" and "lines" not in roomy[0].block.splitlines()[1]
    tested, _ = base_context(repo, base, ["lib/small.py"], "files+imports", 40_000, PullsConfig().read_header)
    assert [(r.path, r.why) for r in tested] == [
        ("lib/small.py", "changed by this pull request"),
        ("tests/test_small.py", "tests lib/small.py"),
    ]


def test_issue_text_joined_from_an_issues_table_for_a_git_input(tmp_path):
    repo = make_repo(tmp_path / "calc", {"calc.py": "def div(a, b):\n    return a / b\n"})
    git(repo, "remote", "add", "origin", "https://github.com/acme/calc.git")
    commit(
        repo,
        {"calc.py": "def div(a, b):\n    if b == 0:\n        raise ZeroDivisionError(b)\n    return a / b\n"},
        "Guard the divisor (#5)\n\nFixes #9",
        author=ALICE,
    )
    issues = tmp_path / "issues.jsonl"
    issues.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {
                    "number": 9,
                    "title": "Crash on zero",
                    "body": "div(1, 0) crashes, cc @frank-z",
                    "repository_url": "https://api.github.com/repos/acme/calc",
                },
                {"number": 5, "title": "Guard the divisor", "pull_request": {"url": "..."}},  # a PR, not an issue
                {"title": "no number"},
            ]
        )
        + "\n"
    )
    reader = PullReader([str(repo)], PullsConfig(issues=str(issues)))
    (doc,) = run_reader(reader)
    assert "\nIssue #9: Crash on zero\ndiv(1, 0) crashes, cc user_2\n" in doc.text and "frank" not in doc.text
    assert doc.text.index("Issue #9") < doc.text.index("Commit 1/1")
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["issues_table/issues"] == 1 and stats["issues_table/pull_request"] == 1
    assert stats["issues_table/no_number"] == 1
    (bare,) = run_reader(PullReader([str(repo)]))  # no table: the issue is left out, not a placeholder
    assert "Issue #9" not in bare.text and "Fixes #9" in bare.text
    with pytest.raises(FileNotFoundError, match="pulls.issues="):
        run_reader(PullReader([str(repo)], PullsConfig(issues=str(tmp_path / "missing.jsonl"))))
