"""No person left in pull-request and commit documents, checked as a scan of the prep output: a real git
history planted with every form a login or name takes (trailers, noreply e-mails, merge subjects, @mentions in
descriptions and commit messages), decorators kept as written; and this repository's own history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sources_fixtures import REPO_ROOT, commit, git, make_repo, read_documents, run_reader

from midtrain.sources.commits import CommitReader, CommitsConfig
from midtrain.sources.common import Pseudonyms
from midtrain.sources.prep import prep
from midtrain.sources.privacy import find_leaks, scrub_text
from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pulls import PullReader

JANE = ("Jane Roe", "12345+jroe-gh@users.noreply.github.com")
VICTOR = ("Victor Hale", "victor.hale@corp.example.net")
IDENTITIES = [
    "Jane Roe",
    "jroe-gh",
    "Victor Hale",
    "victor.hale",
    "corp.example.net",
    "mallory-k",
    "trudy-z",
    "oscar-p",
    "Peggy Sue",
    "peggy-s",
    "noreply.github.com",
]
CALC = "def div(a, b):\n    return a / b\n\n\ndef mul(a, b):\n    return a * b\n"


def planted_history(root: Path) -> Path:
    """PR #1 through the merge button from jroe-gh's fork, a co-author and @mentions in its commit message;
    PR #2 squash-merged with a squash description of trailers, a noreply e-mail, a quoted merge subject, an
    ``owner:branch`` label and decorators in code and prose; PR #3 titled with an ``owner:branch`` merge."""
    repo = make_repo(root, {"calc.py": CALC, "README.md": "# calc\n"})
    git(repo, "checkout", "-q", "-b", "jroe-gh-patch-1")
    commit(
        repo,
        {
            "calc.py": CALC.replace(
                "    return a / b", "    if b == 0:\n        raise ZeroDivisionError\n    return a / b"
            )
        },
        "Guard the divisor\n\nAs @trudy-z found, cc @mallory-k.\n\n"
        f"Co-authored-by: {VICTOR[0]} <{VICTOR[1]}>\nSigned-off-by: {JANE[0]} <{JANE[1]}>",
        author=JANE,
    )
    git(repo, "checkout", "-q", "main")
    git(
        repo,
        "merge",
        "-q",
        "--no-ff",
        "jroe-gh-patch-1",
        "-m",
        "Merge pull request #1 from jroe-gh/jroe-gh-patch-1\n\nGuard the divisor\n\nThanks @mallory-k!",
    )
    commit(
        repo,
        {"calc.py": (repo / "calc.py").read_text().replace("return a * b", "return b * a")},
        "Add `@command` and `@group` decorators (#2)\n\n"
        "Use the @command decorator, as @oscar-p asked; mail victor.hale@corp.example.net.\n"
        "Follows up on Merge pull request #1 from jroe-gh/jroe-gh-patch-1\n"
        "```python\n@app.route('/')\ndef index():\n    return '@peggy-s'\n```\n"
        "@property\ndef width(self): ...\n\n"
        "* Fix mul\n\n"
        "Co-authored-by: Peggy Sue <98765+peggy-s@users.noreply.github.com>\n"
        f"Co-authored-by: {VICTOR[0]} <{VICTOR[1]}>",
        author=JANE,
    )
    commit(
        repo,
        {"calc.py": (repo / "calc.py").read_text().replace("def mul", "def times")},
        "Merge oscar-p:rename-mul for the new name (#3)",
        author=VICTOR,
    )
    return repo


def test_prep_output_of_a_planted_history_has_no_leak(tmp_path):
    repo = planted_history(tmp_path / "calc")
    out = tmp_path / "out"
    stats = prep("pulls", [str(repo)], out, ["dedup.enabled=false"])
    assert stats is not None
    docs = read_documents(out / "documents")
    assert sorted(d["id"] for d in docs) == ["pr:calc#1", "pr:calc#2", "pr:calc#3"]
    for d in docs:
        span = d["metadata"].get("context_span") or [0, 0]
        assert find_leaks(d["text"], IDENTITIES, [tuple(span)]) == [], d["id"]
    text = {d["id"]: d["text"] for d in docs}
    # decorators are not people: in backticks, before "decorator", in fenced code, on a line before a def
    assert "Title: Add `@command` and `@group` decorators" in text["pr:calc#2"]
    assert "Use the @command decorator" in text["pr:calc#2"] and "@app.route('/')" in text["pr:calc#2"]
    assert "@property\ndef width" in text["pr:calc#2"] and "return '@peggy-s'" not in text["pr:calc#2"]
    assert re.search(r"Co-authored-by: user_\d+\n", text["pr:calc#2"])
    assert re.search(r"Title: Merge user_\d+:rename-mul for the new name", text["pr:calc#3"])
    assert re.search(r"As user_\d+ found, cc user_\d+\.", text["pr:calc#1"])  # in the commit message


def test_the_scan_finds_every_planted_form():
    """The scan itself: each form found in unscrubbed text (so a clean scan means something), none once
    scrubbed, and code (a diff, a read file's span, inline code) not scanned."""
    raw = (
        "Co-authored-by: Jane Roe <jane@corp.example.net>\n"
        "mail 12345+jroe-gh@users.noreply.github.com\n"
        "Merge pull request #4 from jroe-gh/fix\n"
        "Merge jroe-gh:fix into main\n"
        "thanks @mallory-k\n"
    )
    kinds = sorted({k for k, _ in find_leaks(raw, ["Jane Roe"])})
    assert kinds == ["email", "identity", "mention", "merge_owner", "noreply_email", "trailer"]
    clean = scrub_text(raw, Pseudonyms("user"))
    assert find_leaks(clean, ["Jane Roe", "jroe-gh", "mallory-k"]) == [], clean
    code = "Use `@mallory-k`\ndiff --git a/x b/x\n@@ -1 +1 @@\n-a = '@trudy-z'\n+b\n[read]\nby @eve-q\n"
    start = code.index("[read]")
    assert find_leaks(code, skip_spans=[(start, len(code))]) == []
    assert find_leaks(code) == [("mention", "@eve-q")]


@pytest.mark.parametrize("reader", ["commits", "pulls"])
def test_this_repositorys_history_has_no_leak(reader):
    """The newest 60 commits of this repository (others commit concurrently: whatever they are), as commit
    documents and as the pull requests its history names: no author's name or e-mail, no mention left."""
    log = git(REPO_ROOT, "log", "-60", "--format=%an%x00%ae").split("\n")
    people = {p for line in log if line for p in line.split("\0") if len(p) >= 4}
    if reader == "commits":
        docs = run_reader(CommitReader([str(REPO_ROOT)], CommitsConfig(max_commits=60)))
    else:
        docs = run_reader(PullReader([str(REPO_ROOT)], PullsConfig(context="none", require_code_change=False)))
    assert docs or reader == "pulls"
    for d in docs:
        span = d.metadata.get("context_span") or [0, 0]
        leaks = [(k, w) for k, w in find_leaks(d.text, people, [tuple(span)]) if k != "identity" or "@" in w]
        assert leaks == [], d.id
