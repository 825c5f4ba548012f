"""commits source: real git histories built in the test, and this project's own history."""

from __future__ import annotations

import pytest

from midtrain.sources.commits import CommitReader, CommitsConfig
from sources_fixtures import REPO_ROOT, git, make_repo, commit, run_reader

ALICE = ("Alice Martin", "alice.martin@corp.example")
BOB = ("Bob Stone", "bob@stone.example")


@pytest.fixture
def history(tmp_path):
    repo = make_repo(tmp_path / "hist", {"a.py": "x = 1\n", "LICENSE": "Apache License\nVersion 2.0\n"},
                     message="first: add a.py", author=ALICE)
    shas = [git(repo, "rev-parse", "HEAD").strip()]
    shas.append(commit(repo, {"a.py": "x = 2\n"}, "second: bump x\n\nSigned-off-by: Bob Stone <bob@stone.example>\n"
                       "Reviewed-by: Carol Unknown <carol@elsewhere.example>", author=BOB, date="2024-01-02T00:00:00Z"))
    git(repo, "checkout", "-q", "-b", "feature")
    shas.append(commit(repo, {"b.py": "y = 1\n", "logo.bin": b"\x00\x01\x02" * 100}, "third: feature with binary",
                       author=ALICE, date="2024-01-03T00:00:00Z"))
    git(repo, "checkout", "-q", "main")
    shas.append(commit(repo, {"c.py": "z = 1\n"}, "fourth: on main", author=BOB, date="2024-01-04T00:00:00Z"))
    git(repo, "merge", "-q", "--no-ff", "feature", "-m", "Merge branch feature", author=BOB, date="2024-01-05T00:00:00Z")
    shas.append(git(repo, "rev-parse", "HEAD").strip())
    shas.append(commit(repo, {"big.py": "".join(f"line_{i} = {i}\n" for i in range(20_000))}, "sixth: huge file",
                       author=ALICE, date="2024-01-06T00:00:00Z"))
    return repo, shas


def test_chronological_anonymised_and_explicit_policies(history):
    repo, shas = history
    reader = CommitReader([str(repo)], CommitsConfig(max_diff_bytes=5_000))
    [doc] = run_reader(reader)
    text = doc.text
    merge = shas[4]
    # oldest first; the merge commit skipped (policy), everything else present in order
    assert doc.metadata["commits"] == [s for s in shas if s != merge]
    starts = [text.index(f"commit {s[:12]}") for s in doc.metadata["commits"]]
    assert starts == sorted(starts)
    # anonymised: no names or emails left, consistent aliases, trailers rewritten, unknown emails masked
    for secret in ["Alice", "alice.martin", "Bob Stone", "bob@stone", "Carol Unknown", "carol@elsewhere"]:
        assert secret not in text
    assert text.count("Author: author_1") == 3 and text.count("Author: author_2") == 2
    assert "Signed-off-by: author_2" in text and "Reviewed-by: author_3" in text
    # binary change marked, huge diff cut with a marker saying how much
    assert "[binary file changed: Binary files /dev/null and b/logo.bin differ]" in text
    assert "[diff truncated:" in text and "line_19999" not in text
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["skip/merge_commit"] == 1 and stats["skip/binary_file_diff"] == 1
    assert stats["skip/huge_diff_truncated"] == 1 and stats["records"] == 6
    assert doc.metadata["license"] == "Apache-2.0" and doc.metadata["source"] == "commit"


def test_merge_message_policy_and_bounded_groups(history):
    repo, shas = history
    docs = run_reader(CommitReader([str(repo)], CommitsConfig(merges="message", max_doc_bytes=2_000,
                                                              max_diff_bytes=1_000)))
    assert len(docs) > 1
    all_commits = [c for d in docs for c in d.metadata["commits"]]
    assert all_commits == shas  # merge kept as a message-only entry, order preserved across documents
    merge_doc = next(d for d in docs if shas[4] in d.metadata["commits"])
    assert f"Merge: {shas[3][:12]}" in merge_doc.text
    # consecutive runs: each document is a contiguous slice of the history, ids name first..last
    for d in docs:
        cs = d.metadata["commits"]
        assert d.id == f"commit:hist@{cs[0][:12]}..{cs[-1][:12]}"
        assert len(d.text.encode()) <= 2_000 or len(cs) == 1


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
