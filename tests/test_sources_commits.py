"""commits source: real git histories built in the test, and this project's own history."""

from __future__ import annotations

import pytest
from sources_fixtures import REPO_ROOT, commit, git, make_repo, run_reader

from midtrain.sources.commits import CommitReader, CommitsConfig

ALICE = ("Alice Martin", "alice.martin@corp.example")
BOB = ("Bob Stone", "bob@stone.example")


@pytest.fixture
def history(tmp_path):
    repo = make_repo(
        tmp_path / "hist",
        {"a.py": "x = 1\n", "LICENSE": "Apache License\nVersion 2.0\n"},
        message="first: add a.py",
        author=ALICE,
    )
    shas = [git(repo, "rev-parse", "HEAD").strip()]
    shas.append(
        commit(
            repo,
            {"a.py": "x = 2\n"},
            "second: bump x\n\nSigned-off-by: Bob Stone <bob@stone.example>\n"
            "Reviewed-by: Carol Unknown <carol@elsewhere.example>",
            author=BOB,
            date="2024-01-02T00:00:00Z",
        )
    )
    git(repo, "checkout", "-q", "-b", "feature")
    shas.append(
        commit(
            repo,
            {"b.py": "y = 1\n", "logo.bin": b"\x00\x01\x02" * 100},
            "third: feature with binary",
            author=ALICE,
            date="2024-01-03T00:00:00Z",
        )
    )
    git(repo, "checkout", "-q", "main")
    shas.append(commit(repo, {"c.py": "z = 1\n"}, "fourth: on main", author=BOB, date="2024-01-04T00:00:00Z"))
    git(
        repo, "merge", "-q", "--no-ff", "feature", "-m", "Merge branch feature", author=BOB, date="2024-01-05T00:00:00Z"
    )
    shas.append(git(repo, "rev-parse", "HEAD").strip())
    shas.append(
        commit(
            repo,
            {"big.py": "".join(f"line_{i} = {i}\n" for i in range(20_000))},
            "sixth: huge file",
            author=ALICE,
            date="2024-01-06T00:00:00Z",
        )
    )
    return repo, shas


def test_chronological_anonymised_and_explicit_policies(history):
    repo, shas = history
    reader = CommitReader([str(repo)], CommitsConfig(max_diff_bytes=5_000))
    [doc] = run_reader(reader)
    text = doc.text
    merge = shas[4]
    # oldest first; the merge commit skipped (policy), everything else present in order
    assert doc.metadata["commits"] == [s for s in shas if s not in (merge, shas[5])]
    starts = [text.index(f"commit {s[:12]}") for s in doc.metadata["commits"]]
    assert starts == sorted(starts)
    # anonymised: no names or emails left, consistent aliases, trailers rewritten, unknown emails masked
    for secret in ["Alice", "alice.martin", "Bob Stone", "bob@stone", "Carol Unknown", "carol@elsewhere"]:
        assert secret not in text
    assert text.count("Author: author_1") == 2 and text.count("Author: author_2") == 2
    assert "Signed-off-by: author_2" in text and "Reviewed-by: author_3" in text
    # a binary file's section is removed whole (no stub line); a commit whose only file is over the diff cap
    # is skipped, and both paths are listed with their reasons
    assert "logo.bin" not in text and "Binary files" not in text and "b/b.py" in text
    assert "line_1" not in text and f"commit {shas[5][:12]}" not in text
    assert doc.metadata["removed_files"] == [
        {"path": "logo.bin", "reason": "binary"},
        {"path": "big.py", "reason": "huge_file_diff (commit skipped)"},
    ]
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["skip/merge_commit"] == 1 and stats["skip/file_binary"] == 1
    assert stats["skip/file_huge_file_diff"] == 1 and stats["skip/only_removed_files"] == 1 and stats["records"] == 6
    assert doc.metadata["license"] == "Apache-2.0" and doc.metadata["source"] == "commit"


def test_merge_message_policy_and_bounded_groups(history):
    repo, shas = history
    docs = run_reader(
        CommitReader([str(repo)], CommitsConfig(merges="message", max_doc_bytes=1_024, max_diff_bytes=400_000))
    )
    assert len(docs) > 1
    all_commits = [c for d in docs for c in d.metadata["commits"]]
    assert all_commits == shas  # merge kept as a message-only entry, order preserved across documents
    merge_doc = next(d for d in docs if shas[4] in d.metadata["commits"])
    assert f"Merge: {shas[3][:12]}" in merge_doc.text
    # consecutive runs: each document is a contiguous slice of the history, ids name first..last
    for d in docs:
        cs = d.metadata["commits"]
        assert d.id == f"commit:hist@{cs[0][:12]}..{cs[-1][:12]}"
        assert len(d.text.encode()) <= 1_024 or len(cs) == 1


def test_not_a_repository_and_empty_repository_are_errors(tmp_path, history):
    repo, _ = history
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    plain = tmp_path / "plain"
    plain.mkdir()
    reader = CommitReader([str(empty), str(plain), str(repo)])
    docs = run_reader(reader)
    assert len(docs) == 1
    errors = {k: v.total for k, v in reader.stats.stats.items() if k.startswith("error/")}
    assert errors == {"error/bad_git_repository": 1, "error/not_a_git_repository": 1}


def test_this_projects_history():
    docs = run_reader(CommitReader([str(REPO_ROOT)], CommitsConfig(max_commits=5)))
    commits = [c for d in docs for c in d.metadata["commits"]]
    assert 1 <= len(commits) <= 5
    log = git(REPO_ROOT, "log", "--format=%H").split()  # others commit concurrently: compare to all
    assert set(commits) <= set(log)
    assert all("diff --git" in d.text for d in docs)


def test_diff_files_go_through_the_repository_filters(tmp_path):
    repo = make_repo(tmp_path / "lib", {"src/core.py": "def f(a, b):\n    return a + b\n", "README.md": "# lib\n"})
    shas = {}
    shas["lock"] = commit(
        repo,
        {
            "uv.lock": "[[package]]\nname = 'x'\n" * 50,
            "src/core.py": "def f(a, b):\n    return a - b\n",
            "docs/logo.svg": "<svg><path d='M0 0 L10 10'/></svg>\n",
            "requirements.txt": "numpy==2.0.1\nrequests==2.32.0\nrich==13.7.1\n",
        },
        "fix f; bump deps",
    )
    shas["only_lock"] = commit(repo, {"uv.lock": "[[package]]\nname = 'y'\n" * 50}, "update uv.lock")
    git(repo, "mv", "src/core.py", "src/ops.py")
    shas["rename"] = commit(repo, {}, "rename core to ops")
    shas["format"] = commit(repo, {"src/ops.py": "def f(a,b):\n    return a-b\n"}, "apply black")
    shas["bot"] = commit(
        repo,
        {"README.md": "# lib\n\nbadge\n"},
        "Bump x",
        author=("dependabot[bot]", "49699333+dependabot[bot]@users.noreply.github.com"),
    )
    shas["key"] = commit(
        repo,
        {
            "deploy/id_rsa": "-----BEGIN RSA PRIVATE KEY-----\n" + "QUJD" * 16 + "\n-----END RSA PRIVATE KEY-----\n",
            "src/ops.py": "def f(a, b):\n    return a * b\n",
        },
        "deploy key",
    )
    reader = CommitReader([str(repo)])
    [doc] = run_reader(reader)
    text = doc.text
    kept = doc.metadata["commits"]
    assert shas["lock"] in kept and shas["rename"] in kept and shas["key"] in kept
    assert shas["only_lock"] not in kept and shas["format"] not in kept and shas["bot"] not in kept
    for gone in ("uv.lock", "logo.svg", "requirements.txt", "PRIVATE KEY", "id_rsa", "dependabot"):
        assert gone not in text, gone
    assert "rename from src/core.py\nrename to src/ops.py" in text and "deleted file mode" not in text
    assert text.startswith("commit ") and "return a * b" in text
    reasons = {(r["path"], r["reason"]) for r in doc.metadata["removed_files"]}
    assert {
        ("uv.lock", "lock_file"),
        ("docs/logo.svg", "svg"),
        ("requirements.txt", "lock_file"),
        ("deploy/id_rsa", "private_key"),
        ("uv.lock", "lock_file (commit skipped)"),
    } <= reasons
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["skip/bot_commit"] == 1 and stats["skip/formatting_only_commit"] == 1
    assert stats["skip/only_removed_files"] == 1 and stats["skip/file_lock_file"] == 3 and stats["skip/file_svg"] == 1
    # bots kept and counted when asked
    [marked] = run_reader(CommitReader([str(repo)], CommitsConfig(bots="mark")))
    assert marked.metadata["bot_commits"] == 1 and marked.metadata["bot_bytes"] > 0
