"""Pull requests of a real git history, the decisions and facts right: bots by who opened the PR, sync PRs
dropped and counted, each commit in one document, the real base branch, remote-tracking branches read,
commit sequences that do not apply to the base detected, the repository's name never from a local path, a
``pulls.repos`` layout that finds no clone an error, PRs of no code dropped and counted."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from curate_helpers import stdlib
from sources_fixtures import commit, git, make_repo, run_reader

from midtrain.cli import main
from midtrain.sources.bots import is_bot_name, is_bot_user
from midtrain.sources.commits import CommitReader, CommitsConfig, is_bot
from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pull_context import history_pulls, reverse_patch
from midtrain.sources.pulls import PullReader

ALICE = ("Alice Walker", "alice@example.org")
BOB = ("Bob Stone", "bob@example.org")
PRECOMMIT = ("pre-commit-ci[bot]", "66853113+pre-commit-ci[bot]@users.noreply.github.com")
DEPENDABOT = ("dependabot[bot]", "49699333+dependabot[bot]@users.noreply.github.com")
CALC = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(12))


def _merge(repo: Path, branch: str, message: str) -> str:
    git(repo, "merge", "-q", "--no-ff", branch, "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def build(root: Path) -> Path:
    """main and stable: #1 on main, its last commit pre-commit-ci's fix-up; #2 dependabot's; #3 merged into
    stable; #4 merges stable into main ("Merge stable into main": a sync PR carrying #3); #5 a branch that
    merged stable midway (#3's commit is in its range); #6 a branch that merged main midway and edited the
    file main changed (its later commit does not apply to its base); #7 a README edit alone."""
    repo = make_repo(root, {"calc.py": CALC, "notes.py": "NOTES = []\n", "README.md": "# calc\n"})
    git(repo, "branch", "stable")
    git(repo, "checkout", "-q", "-b", "alice/typed")
    commit(repo, {"calc.py": CALC.replace("def f0(x):", "def f0(x: int):")}, "Type f0", author=ALICE)
    commit(repo, {"calc.py": CALC.replace("def f0(x):", "def f0(x: int) :")}, "[pre-commit.ci] fixes", author=PRECOMMIT)
    git(repo, "checkout", "-q", "main")
    _merge(repo, "alice/typed", "Merge pull request #1 from alice/typed\n\nType f0")
    git(repo, "checkout", "-q", "-b", "dependabot/pip/x")
    commit(repo, {"notes.py": "NOTES = [1]\n"}, "Bump x", author=DEPENDABOT)
    git(repo, "checkout", "-q", "main")
    _merge(repo, "dependabot/pip/x", "Merge pull request #2 from acme/dependabot/pip/x\n\nBump x")
    git(repo, "checkout", "-q", "-b", "bob/notes", "stable")
    commit(repo, {"stable.py": "FIXED = True\n"}, "Note the stable fix", author=BOB)
    git(repo, "checkout", "-q", "stable")
    _merge(repo, "bob/notes", "Merge pull request #3 from bob/notes\n\nNote the stable fix")
    git(repo, "checkout", "-q", "-b", "sync", "stable")
    git(repo, "checkout", "-q", "main")
    _merge(repo, "sync", "Merge pull request #4 from acme/sync\n\nMerge stable into main")
    git(repo, "checkout", "-q", "-b", "alice/f1", "main~1")  # before the sync: #3 reaches it only by merge
    commit(repo, {"calc.py": (repo / "calc.py").read_text().replace("x + 1\n", "x + 1  # one\n")}, "f1", author=ALICE)
    git(repo, "merge", "-q", "--no-ff", "stable", "-m", "Merge branch 'stable' into alice/f1")
    commit(repo, {"calc.py": (repo / "calc.py").read_text().replace("x + 2\n", "x + 2  # two\n")}, "f2", author=ALICE)
    git(repo, "checkout", "-q", "main")
    _merge(repo, "alice/f1", "Merge pull request #5 from alice/f1\n\nComment f1 and f2")
    git(repo, "checkout", "-q", "-b", "bob/f9")
    commit(repo, {"calc.py": (repo / "calc.py").read_text().replace("x + 9\n", "x + 9  # nine\n")}, "f9", author=BOB)
    git(repo, "checkout", "-q", "main")
    commit(repo, {"calc.py": (repo / "calc.py").read_text().replace("x + 5\n", "x + 5  # five\n")}, "f5 on main")
    git(repo, "checkout", "-q", "bob/f9")
    git(repo, "merge", "-q", "--no-ff", "main", "-m", "Merge branch 'main' into bob/f9")
    commit(repo, {"calc.py": (repo / "calc.py").read_text().replace("x + 5  # five", "x + 5  # 5")}, "f5", author=BOB)
    git(repo, "checkout", "-q", "main")
    _merge(repo, "bob/f9", "Merge pull request #6 from bob/f9\n\nComment f9 and f5")
    commit(repo, {"README.md": "# calc\n\nA calculator.\n"}, "Describe calc (#7)", author=BOB)
    return repo


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("facts") / "calc")


def _stats(reader) -> dict[str, int]:
    return {k: v.total for k, v in reader.stats.stats.items()}


def test_bots_by_opener_sync_prs_dropped_each_commit_once(history):
    reader = PullReader([str(history)], PullsConfig(context="files"))
    docs = {d.id: d for d in run_reader(reader)}
    stats = _stats(reader)
    # #1 is Alice's though pre-commit-ci pushed last; #2 dependabot opened; #4 is the sync; #7 changes no code
    assert sorted(docs) == ["pr:calc#1", "pr:calc#3", "pr:calc#5", "pr:calc#6"]
    assert stats["dropped/bot_author"] == 1 and stats["dropped/sync_pull"] == 1
    assert stats["dropped/no_code_change"] == 1
    commits = [c for d in docs.values() for c in d.metadata["commits"]]
    assert len(commits) == len(set(commits))  # #3's commit shown in #3 only, not again in #5
    assert stats["skip/commit_in_earlier_document"] == 1
    assert "Note the stable fix" not in docs["pr:calc#5"].text.split("Commit 1/")[1]


def test_the_real_base_branch_from_a_plain_clone(history, tmp_path):
    """A plain ``git clone`` has the maintenance branch as origin/stable only: #3 is still found, its base
    said to be stable; the others' main."""
    clone = tmp_path / "calc"  # its origin a local path: named for its folder, as ids go
    subprocess.run(["git", "clone", "-q", str(history), str(clone)], check=True, capture_output=True)
    assert git(clone, "branch", "--format=%(refname:short)").split() == ["main"]
    records = {r["number"]: r for _, r in history_pulls(clone, None)}
    assert sorted(records) == [1, 2, 3, 4, 5, 6, 7]
    assert records[3]["base"]["ref"] == "stable" and records[1]["base"]["ref"] == "main"
    assert records[4]["found_as"] == "sync" and records[4]["carries"] == [3]
    assert records[1]["user"]["name"] == ALICE[0] and records[2]["user"]["type"] == "Bot"
    docs = {d.id: d.text for d in run_reader(PullReader([str(clone)], PullsConfig(context="none")))}
    assert "\nBase: stable at commit " in docs["pr:calc#3"] and "\nBase: main at commit " in docs["pr:calc#1"]


def test_commits_that_do_not_apply_to_the_base_fall_back_to_the_prs_diff(history):
    """#6 merged main midway: its base is the merge base (after "f5 on main"), its first commit was made
    before: the sequence does not apply to the base blobs shown, so the PR's diff from its base is shown."""
    reader = PullReader([str(history)], PullsConfig(context="files"))
    docs = {d.id: d for d in run_reader(reader)}
    assert _stats(reader)["skip/commits_not_applying"] == 1
    six = docs["pr:calc#6"]
    assert six.metadata["commits"] == [] and "Commit 1/" not in six.text and "\nFiles changed:" in six.text
    assert "+    return x + 9  # nine" in six.text and "+    return x + 5  # 5" in six.text
    assert "Commit 1/2" in docs["pr:calc#5"].text  # #5's two commits apply in turn (#3's left out)


def test_the_repository_name_from_a_forge_origin_or_explicitly_never_a_local_path(tmp_path):
    repo = make_repo(tmp_path / "lib", {"lib.py": "X = 1\n"})
    commit(repo, {"lib.py": "X = 2\n"}, "Bump X (#1)", author=ALICE)
    git(repo, "remote", "add", "origin", "/data/mirrors/lib.git")
    (doc,) = run_reader(PullReader([str(repo)]))
    assert doc.id == "pr:lib#1" and doc.metadata["repo"] is None and "mirrors" not in json.dumps(doc.metadata)
    assert "Repository:" not in doc.text
    (named,) = run_reader(PullReader([str(repo)], PullsConfig(repo="acme/lib")))
    assert named.id == "pr:acme/lib#1" and "\nRepository: acme/lib\n" in named.text
    (commits,) = run_reader(CommitReader([str(repo)]))
    assert commits.metadata["repo"] is None
    git(repo, "remote", "set-url", "origin", "git@github.com:acme/lib.git")
    (forge,) = run_reader(PullReader([str(repo)]))
    assert forge.metadata["repo"] == "acme/lib"
    with pytest.raises(ValueError, match="repo: must be owner/name"):
        PullsConfig(repo="lib").check()


def test_a_repos_layout_that_finds_no_clone_is_an_error_naming_the_paths_tried(tmp_path, capsys):
    repos = tmp_path / "clones"
    make_repo(repos / "calc", {"calc.py": CALC})  # DIR/name: not a layout the lookup knows
    record = {
        "repo": "acme/calc",
        "number": 1,
        "title": "Fix",
        "base": {"sha": "0" * 40},
        "files": [{"filename": "calc.py", "patch": "@@ -1 +1 @@\n-a\n+b"}],
    }
    prs = tmp_path / "prs.jsonl"
    prs.write_text(json.dumps(record) + "\n")
    with pytest.raises(FileNotFoundError, match=r"1 of 1 pull requests found no clone \(tried .*clones/acme/calc"):
        run_reader(PullReader([str(prs)], PullsConfig(repos=str(repos))))
    rc = main(["prep", "pulls", "--input", str(prs), "--output", str(tmp_path / "out"), f"pulls.repos={repos}"])
    assert rc != 0 and "1 of 1 pull requests found no clone (tried " in capsys.readouterr().err  # prep stops
    (repos / "acme").mkdir()
    (repos / "calc").rename(repos / "acme" / "calc")
    reader = PullReader([str(prs)], PullsConfig(repos=str(repos)))
    assert len(run_reader(reader)) == 1 and _stats(reader)["skip/no_base_commit"] == 1


def test_prs_of_no_code_dropped_and_counted_unless_asked(history):
    reader = PullReader([str(history)], PullsConfig(context="none", require_code_change=False))
    assert "pr:calc#7" in [d.id for d in run_reader(reader)] and "dropped/no_code_change" not in _stats(reader)


def test_one_bot_list_for_pull_requests_and_commits(tmp_path):
    for name in ("bors", "k8s-ci-robot", "netlify", "coveralls", "pre-commit-ci[bot]", "renovate-bot"):
        assert is_bot_name(name) and is_bot(name, "") and is_bot_user({"login": name}), name
    assert is_bot("Renovate Bot", "bot@renovateapp.com") and not is_bot_name("Borsch Stale", "bo@x.org")
    assert not is_bot_user({"login": "alice", "type": "User"}) and is_bot_user({"login": "x", "type": "Bot"})
    repo = make_repo(tmp_path / "r", {"a.py": "A = 1\n"})
    commit(repo, {"a.py": "A = 2\n"}, "Auto-merge", author=("bors", "bors@rust-lang.org"))
    reader = CommitReader([str(repo)], CommitsConfig())
    run_reader(reader)
    assert _stats(reader)["skip/bot_commit"] == 1


OPS = (
    'def clamp(x, lo, hi):\n    """x limited to [lo, hi]."""\n    if x < lo:\n        return lo\n    if x > hi:\n'
    '        return hi\n    return x\n\n\ndef mean(xs):\n    """The arithmetic mean of a non-empty sequence."""\n'
    "    return sum(xs) / len(xs)\n"
)
SWESMITH = Path(__file__).parent / "data" / "swesmith" / "task_rows.jsonl"


def test_a_swe_smith_row_is_read_with_its_patch_reversed(tmp_path):
    """The row's patch breaks the mirror; the document's diff is the fix: applied with the real ``git apply``
    to the broken tree, it gives the mirror's file back."""
    (row,) = [json.loads(line) for line in SWESMITH.read_text().splitlines()]
    reader = PullReader([str(SWESMITH)])
    (doc,) = run_reader(reader)
    assert doc.id == "pr:acme/mathx#acme__mathx.8a3f2c1d.func_pm_op_change__k2v9q0ab"
    assert doc.metadata["repo"] == "acme/mathx" and "error/bad_record" not in _stats(reader)
    assert "-    if x < hi:\n+    if x > hi:" in doc.text  # the fix, not the bug
    assert "- tests/test_ops.py::test_clamp_high" in doc.text and "clamp(5, 0, 10)" in doc.text
    mirror = make_repo(tmp_path / "mathx", {"mathx/ops.py": OPS})
    (tmp_path / "bug.diff").write_text(row["patch"])
    git(mirror, "apply", str(tmp_path / "bug.diff"))
    assert (mirror / "mathx" / "ops.py").read_text() != OPS
    fix = doc.text.split("\n--- mathx/ops.py (modified, +2 -2)\n", 1)[1].split("\n\nTests that must pass")[0]
    header = "diff --git a/mathx/ops.py b/mathx/ops.py\n--- a/mathx/ops.py\n+++ b/mathx/ops.py\n"
    (tmp_path / "fix.diff").write_text(header + fix.rstrip("\n") + "\n")
    git(mirror, "apply", str(tmp_path / "fix.diff"))
    assert (mirror / "mathx" / "ops.py").read_text() == OPS


def test_a_reversed_patch_undoes_every_kind_of_change(tmp_path):
    """Added, deleted, renamed-and-edited files, a removed line that reads like a header, no newline at the
    end: ``git apply`` of the reversed diff on the new tree gives the old tree back."""
    old = {"keep.sql": "-- a comment\nSELECT 1;\n", "gone.py": "X = 1\n", "old_name.py": OPS, "tail.txt": "a\nb"}
    repo = make_repo(tmp_path / "r", old)
    a = git(repo, "rev-parse", "HEAD").strip()
    (repo / "gone.py").unlink()
    (repo / "old_name.py").rename(repo / "new_name.py")
    commit(
        repo,
        {
            "keep.sql": "SELECT 1;\n",
            "new.py": "Y = 2\n",
            "new_name.py": OPS.replace("x > hi", "x >= hi"),
            "tail.txt": "a\nc\n",
        },
        "change everything",
    )
    patch = git(repo, "diff", "--find-renames", a, "HEAD")
    assert "rename from old_name.py" in patch and "\\ No newline at end of file" in patch
    (tmp_path / "undo.diff").write_text(reverse_patch(patch))
    git(repo, "apply", str(tmp_path / "undo.diff"))
    git(repo, "add", "-A")
    assert git(repo, "diff", "--cached", "--stat", a) == ""  # the old tree, byte for byte


def test_files_many_documents_show_are_windows_after_the_first_ones(tmp_path):
    """Four PRs edit one large module and the changelog: the module is read whole by the first two, then as
    windows around each edit (its lines those of the base); the changelog always as windows."""
    core = stdlib("textwrap.py")
    changes = "Changes\n=======\n\n" + "".join(f"Version 0.{i}\n-----------\n\n- A change.\n\n" for i in range(300))
    repo = make_repo(tmp_path / "lib", {"lib/core.py": core, "CHANGES.rst": changes})
    marks = ["def dedent(text):", "def indent(text, prefix, predicate=None):", "def fill(text, width=70, **kwargs):"]
    marks.append("def shorten(text, width, **kwargs):")
    for i, mark in enumerate(marks, 1):
        text = (repo / "lib" / "core.py").read_text()
        assert mark in text
        log = (repo / "CHANGES.rst").read_text().replace("- A change.", f"- Change {i}.", 1)
        commit(
            repo, {"lib/core.py": text.replace(mark, mark + f"  # edit {i}"), "CHANGES.rst": log}, f"Edit {i} (#{i})"
        )
    reader = PullReader([str(repo)], PullsConfig(context="files"))
    docs = run_reader(reader)
    assert [d.id for d in docs] == ["pr:lib#1", "pr:lib#2", "pr:lib#3", "pr:lib#4"]
    heads = [[h for h in d.text.splitlines() if h.startswith("[read at base commit")] for d in docs]
    for i, h in enumerate(heads):
        core_head, log_head = (next(x for x in h if f": {p} (" in x) for p in ("lib/core.py", "CHANGES.rst"))
        assert ("; lines " in core_head) == (i >= 2), core_head
        assert "; lines " in log_head
    assert _stats(reader)["skip/context_windowed_repeated"] == 2 + 4
    total = sum(len(d.text) for d in docs)
    log_bytes = sum(
        len(b) for d in docs for b in d.text.split("\n[read at base commit")[1:] if ": CHANGES.rst (" in b[:80]
    )
    assert log_bytes < len(changes) / 2 and log_bytes / total < 0.1  # whole, it would be 4 copies of 12 KB
    # a window shows the base's own lines
    base = git(repo, "rev-parse", "HEAD~1").strip()
    block = docs[3].text.split(": lib/core.py (", 1)[1].split("]\n", 1)[1]
    shown = [ln for ln in block.split("\n[read at")[0].split("\nCommit ")[0].split("\n") if ln != "..."]
    at_base = git(repo, "show", f"{base}:lib/core.py").split("\n")
    assert shown and all(ln in at_base for ln in shown)


def test_the_base_branch_of_a_pr_merged_into_a_deleted_maintenance_branch(tmp_path):
    """1.x is merged into main ("Merge branch '1.x'") and deleted: its PR's base is still 1.x, read from the
    merge's subject; the PR merged into main says main; 2.x's PR, merged back by a sync PR from a branch
    "2.x-into-main", says 2.x."""
    repo = make_repo(tmp_path / "lib", {"lib.py": CALC})
    git(repo, "checkout", "-q", "-b", "1.x")
    git(repo, "checkout", "-q", "-b", "fix")
    commit(repo, {"lib.py": CALC.replace("x + 3\n", "x + 3  # fixed\n")}, "Fix f3", author=BOB)
    git(repo, "checkout", "-q", "1.x")
    _merge(repo, "fix", "Merge pull request #8 from bob/fix\n\nFix f3")
    git(repo, "checkout", "-q", "main")
    git(repo, "checkout", "-q", "-b", "feat")
    commit(repo, {"lib.py": CALC.replace("x + 7\n", "x + 7  # seven\n")}, "Note f7", author=ALICE)
    git(repo, "checkout", "-q", "main")
    _merge(repo, "feat", "Merge pull request #9 from alice/feat\n\nNote f7")
    _merge(repo, "1.x", "Merge branch '1.x'")
    git(repo, "checkout", "-q", "-b", "2.x")  # merged back through a sync branch named for what it carries
    git(repo, "checkout", "-q", "-b", "fix2")
    commit(repo, {"lib.py": (repo / "lib.py").read_text().replace("x + 5\n", "x + 5  # five\n")}, "f5", author=BOB)
    git(repo, "checkout", "-q", "2.x")
    _merge(repo, "fix2", "Merge pull request #10 from bob/fix2\n\nNote f5")
    git(repo, "checkout", "-q", "-b", "2.x-into-main")
    git(repo, "checkout", "-q", "main")
    _merge(repo, "2.x-into-main", "Merge pull request #11 from acme/2.x-into-main\n\nMerge 2.x into main")
    git(repo, "branch", "-q", "-D", "1.x", "fix", "feat", "2.x", "fix2", "2.x-into-main")
    records = {r["number"]: r for _, r in history_pulls(repo, None)}
    assert records[8]["base"]["ref"] == "1.x" and records[9]["base"]["ref"] == "main"
    assert records[10]["base"]["ref"] == "2.x" and records[11]["found_as"] == "sync"


def test_what_the_changed_files_leave_of_the_budget_goes_to_their_tests(tmp_path):
    """context=files: a module shown as windows (it is too long) leaves budget, spent on its tests (named for
    it, not changed by the PR), read whole after it."""
    big = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(1200))
    test = "from lib.big import f1\n\n\ndef test_f1():\n    assert f1(1) == 2\n"
    repo = make_repo(tmp_path / "lib", {"lib/big.py": big, "tests/test_big.py": test, "CHANGES.rst": "Changes\n"})
    commit(repo, {"lib/big.py": big.replace("x + 600\n", "x + 600  # mid\n")}, "Mark f600 (#1)")
    (doc,) = run_reader(PullReader([str(repo)], PullsConfig(context="files", context_tokens=4000)))
    assert doc.metadata["context_files"] == ["lib/big.py", "tests/test_big.py"]
    assert "[read at base commit " in doc.text and ": tests/test_big.py (tests lib/big.py)]\n" + test in doc.text


def test_a_sync_pr_record_is_known_by_its_title(tmp_path):
    code = [{"filename": "lib.py", "patch": "@@ -1 +1 @@\n-a\n+b"}]
    titles = ["Merge branch 'stable' into main", "Sync main with 8.1.x", "Sync the loader with upstream changes"]
    prs = tmp_path / "prs.jsonl"
    prs.write_text(
        "".join(
            json.dumps({"repo": "acme/lib", "number": i, "title": t, "files": code}) + "\n"
            for i, t in enumerate(titles)
        )
    )
    reader = PullReader([str(prs)])
    assert [d.metadata["number"] for d in run_reader(reader)] == [2]
    assert _stats(reader)["dropped/sync_pull"] == 2
