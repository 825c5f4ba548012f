"""The file tree at a pull request's base commit (bounded, deterministic, the changed files' folders first) and
the test and CI results after its edits (GitHub check runs and commit statuses, the record's own or joined by
commit from pulls.checks); fixtures in tests/data/pulls_ci are GitHub's published example responses."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sources_fixtures import commit, git, make_repo, run_reader
from test_sources_pull_context import tree_paths

from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pull_context import estimate_tokens, file_tree
from midtrain.sources.pull_render import check_results
from midtrain.sources.pulls import PullReader

CI = Path(__file__).parent / "data" / "pulls_ci"
PATHS = (
    ["README.md", "pyproject.toml", "src/pkg/__init__.py", "src/pkg/core.py", "src/pkg/io/read.py"]
    + [f"docs/page_{i:02d}.rst" for i in range(40)]
    + [f"tests/test_{i:02d}.py" for i in range(30)]
    + ["src/pkg/io/write.py", "examples/a/b/c/deep.py"]
)


def test_file_tree_bounded_deterministic_with_the_changed_files_folders_first():
    whole = file_tree(PATHS, [], 100_000, "a" * 40)
    assert whole is not None and tree_paths(whole) == sorted(PATHS, key=lambda p: p.split("/"))
    assert whole.split("\n")[1] == f"[file tree at base commit {'a' * 12}: {len(PATHS)} files]"
    shuffled = random.Random(0).sample(PATHS, len(PATHS))
    changed = ["tests/test_03.py", "src/pkg/io/read.py"]
    for budget in (45, 60, 120, 200, 400):
        tree = file_tree(PATHS, changed, budget, "a" * 40)
        assert tree is not None and estimate_tokens(tree) <= budget
        assert file_tree(shuffled, list(reversed(changed)), budget, "a" * 40) == tree  # input order: no matter
        lines = tree.strip("\n").split("\n")[1:]
        folded = {ln.strip().split("/ (")[0]: int(ln.split("(")[1].split()[0]) for ln in lines if "/ (" in ln}
        files = [p for p in tree_paths(tree) if "/ (" not in p]
        assert set(files) <= set(PATHS) and len(files) + sum(folded.values()) == len(PATHS)  # listed or counted
    # the source file's folders are opened first (reading order: source before tests), the 40 docs stay folded
    tree = file_tree(PATHS, changed, 60, "a" * 40)
    assert tree is not None and "src/pkg/io/read.py" in tree_paths(tree) and "docs/ (40 files)" in tree
    assert "tests/ (30 files)" in tree and "    io/\n      read.py\n      write.py" in tree and "  a/ (1 file)" in tree
    assert file_tree(PATHS, changed, 40, "a" * 40) is None  # not even the top level fits: no tree, not a cut one
    assert file_tree([], [], 100, "a" * 40) is None


def _fixture(name: str, sha: str) -> dict:
    """A published example response with its commit set to ``sha`` (the key it is joined by)."""
    rec = json.loads((CI / name).read_text())
    if "check_runs" in rec:
        for run in rec["check_runs"]:
            run["head_sha"] = sha
    else:
        rec["sha"] = sha
    return rec


def test_checks_after_the_edits_from_the_record_or_joined_by_commit(tmp_path):
    runs, status = (json.loads((CI / f).read_text()) for f in ("check_runs_for_ref.json", "combined_status.json"))
    assert [(r.name, r.result, r.detail) for r in check_results(runs)] == [
        ("mighty_readme", "neutral", "Mighty Readme report")
    ]
    assert [(r.name, r.result, r.sha[:7]) for r in check_results(status)] == [
        ("continuous-integration/jenkins", "success", "6dcb09b"),
        ("security/brakeman", "success", "6dcb09b"),
    ]
    # a record with its own results: those on its head commit are rendered, those of another commit are not
    record = {
        "repo": "github/hello-world",
        "number": 3956,
        "title": "Say hello",
        "user": {"login": "octocat"},
        "head": {"ref": "say-hello", "sha": runs["check_runs"][0]["head_sha"]},
        "files": [{"filename": "README.md", "status": "modified", "patch": "@@ -1 +1 @@\n-Hi\n+Hello"}],
        "check_runs": runs,
        "statuses": status,  # made on 6dcb09b, not the head
    }
    prs = tmp_path / "prs.jsonl"
    prs.write_text(json.dumps(record) + "\n")
    reader = PullReader([str(prs)], PullsConfig(require_code_change=False))  # a README edit
    (doc,) = run_reader(reader)
    assert doc.text.endswith("\nChecks on commit ce587453ced0:\n- mighty_readme: neutral (Mighty Readme report)\n")
    assert reader.stats.stats["skip/check_of_another_commit"].total == 2

    # a git input joined with a table of results by the PR's last commit; a later run of a check replaces it
    repo = make_repo(tmp_path / "calc", {"calc.py": "def div(a, b):\n    return a / b\n"})
    head = commit(repo, {"calc.py": "def div(a, b):\n    return a / b if b else None\n"}, "Guard div (#5)")
    rerun = _fixture("check_runs_for_ref.json", head)
    rerun["check_runs"][0].update(conclusion="success", completed_at="2018-05-05T00:00:00Z", id=6)
    rows = [_fixture("check_runs_for_ref.json", head), _fixture("combined_status.json", head), rerun, ["x"], {"a": 1}]
    table = tmp_path / "checks.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    reader = PullReader([str(repo)], PullsConfig(checks=str(table)))
    (doc,) = run_reader(reader)
    block = (
        f"\nChecks on commit {head[:12]}:\n- continuous-integration/jenkins: success (Build has completed "
        "successfully)\n- mighty_readme: success (Mighty Readme report)\n- security/brakeman: success (Testing has "
        "completed successfully)\n"
    )
    assert block in doc.text and doc.text.index("Commit 1/1") < doc.text.index(block) < doc.text.index("Final state")
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["checks_table/results"] == 4 and stats["checks_table/unreadable"] == 2
    assert stats["checks_table/no_result"] == 1
    (bare,) = run_reader(PullReader([str(repo)]))  # no results for the commit: no line says so
    assert "Checks" not in bare.text
    with pytest.raises(FileNotFoundError, match="pulls.checks="):
        run_reader(PullReader([str(repo)], PullsConfig(checks=str(tmp_path / "missing.jsonl"))))


def test_the_tree_is_read_at_the_base_and_left_out_under_context_none(tmp_path):
    repo = make_repo(tmp_path / "lib", {"lib/a.py": "A = 1\n", "docs/x.md": "x\n", "README.md": "# lib\n"})
    base = git(repo, "rev-parse", "HEAD").strip()
    commit(repo, {"lib/a.py": "A = 2\n", "lib/new.py": "B = 1\n"}, "Add new (#2)")
    (doc,) = run_reader(PullReader([str(repo)]))
    start, end = doc.metadata["context_span"]
    tree = doc.text[start:end].split("\n[read at")[0]
    assert tree_paths(tree) == ["README.md", "docs/x.md", "lib/a.py"]  # at the base: lib/new.py is not there yet
    assert git(repo, "ls-tree", "-r", "--name-only", base).split() == ["README.md", "docs/x.md", "lib/a.py"]
    (none,) = run_reader(PullReader([str(repo)], PullsConfig(context="none")))
    assert "[file tree" not in none.text and none.metadata["tree_bytes"] == 0
    (off,) = run_reader(PullReader([str(repo)], PullsConfig(tree_tokens=0)))
    assert "[file tree" not in off.text and "[read at base commit" in off.text


def test_a_bots_pull_request_from_a_branch_of_the_repository_is_a_bots(tmp_path):
    """Dependabot opens its PRs from branches of the repository (the merge names its owner, not the bot):
    its commits' author says whose it is, and the PR is dropped as a bot's, counted."""
    repo = make_repo(tmp_path / "lib", {"requirements.txt": "tox==3.15.0\n", "lib.py": "A = 1\n"})
    for n, (branch, who, files) in enumerate(
        [
            (
                "dependabot/pip/tox-3.15.1",
                ("dependabot[bot]", "49699333+dependabot[bot]@users.noreply.github.com"),
                {"requirements.txt": "tox==3.15.1\n"},
            ),
            ("fix-a", ("Ada Lane", "ada@example.org"), {"lib.py": "A = 2\n"}),
        ],
        start=1,
    ):
        git(repo, "checkout", "-q", "-b", branch, "main")
        commit(repo, files, f"Change {n}", author=who)
        git(repo, "checkout", "-q", "main")
        git(repo, "merge", "-q", "--no-ff", branch, "-m", f"Merge pull request #{n} from acme/{branch}\n\nChange {n}")
    reader = PullReader([str(repo)])
    assert [d.id for d in run_reader(reader)] == ["pr:lib#2"]
    assert reader.stats.stats["dropped/bot_author"].total == 1
