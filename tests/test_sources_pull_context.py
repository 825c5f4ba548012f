"""Pull requests joined with their repository: real git histories (merge commits with their branch commits),
the files read at the base commit checked against ``git show BASE:path``, commits in order with their reviews."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from sources_fixtures import commit, git, make_repo, run_reader

from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pull_context import estimate_tokens, history_pulls
from midtrain.sources.pulls import PullReader

MIT = "MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy\n"
ALICE = ("Alice Walker", "alice.walker@example.org")
BOB = ("Bob Kent", "bob.kent@example.org")
HEADER = re.compile(r"^\[read at base commit (\w+): (\S+) \((.*)\)\]$", re.MULTILINE)


def _eval(div: str) -> str:
    return (
        "from calc.errors import CalcError\nfrom calc.ops import OPS\n\n\n"
        "def evaluate(expr):\n    left, op, right = expr.split()\n"
        f"{div}    return OPS[op](float(left), float(right))\n"
    )


def build_calc(root: Path, origin: str = "https://github.com/acme/calc.git") -> dict[str, str]:
    """A small real repository: main moves on while two pull requests are worked on, then both are merged
    (a GitHub merge-button merge and a titled merge); returns the interesting shas."""
    make_repo(
        root,
        {
            "LICENSE": MIT,
            "README.md": "# calc\n",
            "calc/__init__.py": "from calc.eval import evaluate\n",
            "calc/errors.py": 'class CalcError(Exception):\n    """A bad expression."""\n',
            "calc/ops.py": "import operator\n\nOPS = {'+': operator.add, '-': operator.sub, '/': operator.truediv}\n",
            "calc/eval.py": _eval(""),
            "calc/unused.py": "UNUSED = 1\n",
            "tests/test_eval.py": "from calc.eval import evaluate\n\n\ndef test_add():\n"
            "    assert evaluate('1 + 2') == 3\n",
        },
        author=BOB,
    )
    git(root, "remote", "add", "origin", origin)
    sha = {"root": git(root, "rev-parse", "HEAD").strip()}
    git(root, "checkout", "-q", "-b", "fix-div")
    sha["c1"] = commit(
        root,
        {
            "calc/eval.py": _eval(
                "    if op == '/' and float(right) == 0:\n        raise CalcError('division by zero')\n"
            )
        },
        "Raise CalcError on division by zero\n\nFixes #5",
        author=ALICE,
        date="2024-02-01T10:00:00Z",
    )
    sha["c2"] = commit(
        root,
        {
            "tests/test_eval.py": "from calc.eval import evaluate\nimport pytest\n\n\n"
            "def test_div0():\n    with pytest.raises(Exception):\n"
            "        evaluate('1 / 0')\n",
            "poetry.lock": '[[package]]\nname = "pytest"\n',
        },
        "Test the division by zero",
        author=ALICE,
        date="2024-02-02T10:00:00Z",
    )
    git(root, "checkout", "-q", "main")
    sha["main2"] = commit(
        root,
        {"README.md": "# calc\n\nA calculator.\n"},
        "Describe the project",
        author=BOB,
        date="2024-02-01T12:00:00Z",
    )
    git(
        root,
        "merge",
        "-q",
        "--no-ff",
        "fix-div",
        "-m",
        "Merge pull request #7 from alice/fix-div\n\nRaise CalcError on division by zero",
        author=BOB,
        date="2024-02-03T10:00:00Z",
    )
    sha["m7"] = git(root, "rev-parse", "HEAD").strip()
    git(root, "checkout", "-q", "-b", "pow")
    sha["c3"] = commit(
        root,
        {
            "calc/ops.py": "import operator\n\nOPS = {'+': operator.add, '-': operator.sub, "
            "'/': operator.truediv, '**': operator.pow}\n"
        },
        "Add the power operator",
        author=BOB,
        date="2024-02-04T10:00:00Z",
    )
    git(root, "checkout", "-q", "main")
    git(root, "merge", "-q", "--no-ff", "pow", "-m", "Add power operator (#8)", author=BOB, date="2024-02-05T10:00:00Z")
    sha["m8"] = git(root, "rev-parse", "HEAD").strip()
    return sha


def show(repo: Path, rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
    ).stdout


def tree_paths(block: str) -> list[str]:
    """The file paths of a rendered file tree (two spaces a level; ``name/`` a folder), in its order."""
    out: list[str] = []
    folders: list[str] = []
    for line in block.strip("\n").split("\n")[1:]:
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.strip()
        del folders[depth:]
        if name.endswith("/"):
            folders.append(name[:-1])
        else:
            out.append("/".join([*folders, name]))
    return out


def read_blocks(text: str) -> list[tuple[str, str, str, str]]:
    """(sha, path, why, content) of every file the document says was read (a block ends where the next
    section starts: another read file, a commit, the changed files, a comment or the final state)."""
    out = []
    for m in HEADER.finditer(text):
        ends = [
            text.find(s, m.end())
            for s in ("\n\n[read at", "\n\nCommit ", "\n\nFiles changed:", "\n\nuser_", "\n\nFinal state")
        ]
        end = min(e for e in ends + [len(text)] if e >= 0)
        out.append((m.group(1), m.group(2), m.group(3), text[m.end() + 1 : end]))
    return out


@pytest.fixture(scope="module")
def calc(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("calc") / "calc"
    return root, build_calc(root)


def test_merged_pull_requests_from_history_read_at_base_commit_then_commits_in_order(calc):
    repo, sha = calc
    reader = PullReader([str(repo)], PullsConfig(context="files+imports"))
    docs = run_reader(reader)
    assert [d.id for d in docs] == ["pr:acme/calc#7", "pr:acme/calc#8"]
    doc = docs[0]
    text, meta = doc.text, doc.metadata
    base = sha["root"]  # main moved on (README) while the PR was worked on: the merge base, not the first parent
    assert meta["base_commit"] == base and meta["commits"] == [sha["c1"], sha["c2"]]
    assert meta["license"] == "MIT" and meta["repo"] == "acme/calc"
    assert text.startswith(
        f"Title: Raise CalcError on division by zero\nRepository: acme/calc\nBase: main at commit {base[:12]}\n"
    )
    # the issue the commits close, then what was read, then each commit in order, then the outcome
    blocks = read_blocks(text)
    assert [(p, why) for _, p, why, _ in blocks] == [
        ("calc/eval.py", "changed by this pull request"),
        ("tests/test_eval.py", "changed by this pull request"),
        ("calc/errors.py", "imported by calc/eval.py"),
        ("calc/ops.py", "imported by calc/eval.py"),
    ]
    for short, path, _, body in blocks:  # the base commit's contents, exactly
        assert short == base[:12]
        assert body == show(repo, base, path).rstrip("\n")
    assert "calc/unused.py" not in text and "poetry.lock\n" not in text.split("Commit 1/2")[0]
    assert "Issue #5" not in text and "not in the input" not in text  # no text for it: no placeholder line
    order = [
        text.index(s)
        for s in [
            "user_1 opened this pull request",
            "[read at base commit",
            f"Commit 1/2 {sha['c1'][:12]} by user_1:",
            "Raise CalcError on division by zero\n\nFixes #5",
            "+        raise CalcError('division by zero')",
            f"Commit 2/2 {sha['c2'][:12]}",
            "[diff of poetry.lock left out: lock_file]",
            "+def test_div0():",
            f"Final state: merged (main <- fix-div), merge commit {sha['m7'][:12]}",
        ]
    ]
    assert order == sorted(order)
    for ident in ALICE + BOB:
        assert ident not in text
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["skip/file_lock_file"] == 1 and stats["records"] == 2 and stats["documents"] == 2
    # the file tree at the base, first: every path git lists there, in order, read back from the indentation
    tree = text[text.index("\n[file tree at base commit") : text.index("\n[read at")]
    listed = git(repo, "ls-tree", "-r", "--name-only", base).split()
    assert tree.split("\n")[1] == f"[file tree at base commit {base[:12]}: {len(listed)} files]"
    assert tree_paths(tree) == listed and meta["tree_bytes"] == len(tree.encode())
    # context vs edits: bytes of the tree and read files and of the commits, as the document holds them
    read_part = text[text.index("\n[file tree at") : text.index("\nCommit 1/2")]
    edit_part = text[text.index("\nCommit 1/2") : text.index("\nFinal state")]
    assert meta["context_bytes"] == len(read_part.encode()) and meta["edit_bytes"] == len(edit_part.encode())
    start, end = meta["context_span"]  # the tree and read files' chars, which dedup leaves out of the signature
    assert text[start:end] == read_part and stats["skip/issue_without_text"] == 1
    pr8 = docs[1]
    assert pr8.metadata["base_commit"] == sha["m7"] and pr8.metadata["commits"] == [sha["c3"]]
    assert pr8.text.startswith("Title: Add power operator\n")
    assert [p for _, p, _, _ in read_blocks(pr8.text)] == ["calc/ops.py"]  # ops imports nothing of the repo


def test_records_joined_with_clones_reviews_after_the_commit_they_were_made_on(calc, tmp_path):
    repo, sha = calc
    clones = tmp_path / "clones"
    (clones / "acme").mkdir(parents=True)
    git(clones / "acme", "clone", "-q", "--bare", str(repo), "calc.git")  # a bare mirror found by owner/name
    (_, rec7), (_, rec8) = history_pulls(repo, "acme/calc")
    rec7.update(
        body="Fixes #5 too.",
        user={"login": "alice-w"},
        issues=[
            {"number": 5, "title": "Division by zero crashes", "body": "evaluate('1 / 0') raises ZeroDivisionError"},
            {"number": 6, "title": "unrelated", "body": "not linked"},
        ],
        reviews=[
            {
                "id": 1,
                "user": {"login": "bob-k"},
                "state": "CHANGES_REQUESTED",
                "body": "Needs a test.",
                "commit_id": sha["c1"],
                "submitted_at": "2024-02-01T11:00:00Z",
            },
            {
                "id": 2,
                "user": {"login": "bob-k"},
                "state": "APPROVED",
                "body": "Thanks @alice-w",
                "commit_id": sha["c2"],
                "submitted_at": "2024-02-02T12:00:00Z",
            },
        ],
        review_comments=[
            {
                "user": {"login": "bob-k"},
                "body": "and for 1 // 0?",
                "path": "calc/eval.py",
                "line": 7,
                "pull_request_review_id": 1,
                "original_commit_id": sha["c1"],
                "created_at": "2024-02-01T11:00:00Z",
            }
        ],
        comments=[
            {"user": {"login": "carol"}, "body": "LGTM once green", "created_at": "2024-02-02T13:00:00Z"},
            {
                "user": {"login": "codecov[bot]", "type": "Bot"},
                "body": "coverage",
                "created_at": "2024-02-02T13:00:00Z",
            },
        ],
    )
    missing = dict(rec8, number=9, base={"sha": "f" * 40, "ref": "main"})  # base commit not in the clone
    elsewhere = dict(rec8, repo="acme/other", number=10)  # no clone of that repository
    records = tmp_path / "prs.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in (rec7, rec8, missing, elsewhere)))
    reader = PullReader([str(records)], PullsConfig(repos=str(clones), context="files+imports"))
    docs = {d.id: d for d in run_reader(reader)}
    text = docs["pr:acme/calc#7"].text
    order = [
        text.index(s)
        for s in [
            "Issue #5: Division by zero crashes\nevaluate('1 / 0') raises",
            "user_1 opened",
            "[read at base commit",
            "Commit 1/2",
            "user_3 reviewed (CHANGES_REQUESTED):",
            "on calc/eval.py line 7:",
            "Commit 2/2",
            "user_3 reviewed (APPROVED):",
            "Thanks user_1",
            "user_2 commented:\nLGTM once green",
            "Final state: merged",
        ]
    ]
    assert order == sorted(order)
    assert "not linked" not in text and "coverage" not in text and "alice-w" not in text
    assert [p for _, p, _, _ in read_blocks(text)][:2] == ["calc/eval.py", "tests/test_eval.py"]
    # what cannot be joined keeps today's rendering, counted
    for pr_id in ("pr:acme/calc#9", "pr:acme/other#10"):
        assert docs[pr_id].text.startswith("Title: Add power operator\nRepository: acme/")
        assert "\nFiles changed:\n\n--- calc/ops.py (modified, +1 -1)" in docs[pr_id].text
        assert "[read at" not in docs[pr_id].text and "base_commit" not in docs[pr_id].metadata
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["skip/no_base_commit"] == 1 and stats["skip/no_clone"] == 1 and stats["documents"] == 4
    with pytest.raises(FileNotFoundError, match="pulls.repos=.*nowhere: no such directory"):
        run_reader(PullReader([str(records)], PullsConfig(repos=str(tmp_path / "nowhere"))))


def test_context_modes_and_token_budget_nearest_first(calc):
    repo, sha = calc

    def read(**kw) -> tuple[list[tuple], dict]:  # the read files alone (no tree) unless tree_tokens is given
        reader = PullReader([str(repo)], PullsConfig(**{"context": "files+imports", "tree_tokens": 0, **kw}))
        doc = run_reader(reader)[0]
        return read_blocks(doc.text), {k: v.total for k, v in reader.stats.stats.items()}

    assert read(context="none")[0] == []

    assert [b[1] for b in read(context="files")[0]] == ["calc/eval.py", "tests/test_eval.py"]
    full, _ = read(context="files+imports")
    header = PullsConfig().read_header

    def cost(block: tuple) -> int:
        return estimate_tokens("\n" + header.format(sha=block[0], path=block[1], why=block[2]) + "\n" + block[3] + "\n")

    # a budget for the two changed files and the first import: the second import is left out, counted
    budget = sum(cost(b) for b in full[:3])
    blocks, stats = read(context_tokens=budget)
    assert [b[1] for b in blocks] == ["calc/eval.py", "tests/test_eval.py", "calc/errors.py"]
    assert sum(cost(b) for b in blocks) <= budget and stats["skip/context_budget"] == 1
    # a changed file longer than the budget is not read, but what it imports still is, when that fits
    small = cost(full[2])
    assert small < min(cost(full[0]), cost(full[1]))
    assert [b[1] for b in read(context_tokens=small)[0]] == ["calc/errors.py"]
    for budget in range(0, sum(cost(b) for b in full) + 40, 37):  # any budget: nearest first, never over
        blocks = read(context_tokens=budget)[0]
        assert sum(cost(b) for b in blocks) <= budget
        assert [b for b in full if b in blocks] == blocks
    assert read(context_tokens=0)[0] == []
    # the file tree is counted first, against the same budget: what it takes, the read files do not get
    for budget in (20, 60, 200, 10_000):
        reader = PullReader([str(repo)], PullsConfig(context="files+imports", context_tokens=budget))
        doc = run_reader(reader)[0]
        start, end = doc.metadata.get("context_span", (0, 0))
        tree = doc.text[start:end].split("\n[read at")[0] if doc.metadata["tree_bytes"] else ""
        assert estimate_tokens(tree) + sum(cost(b) for b in read_blocks(doc.text)) <= budget
        assert bool(tree) == (budget >= 60) and doc.metadata["tree_bytes"] == len(tree.encode())


def test_swebench_style_task_row_renders_issue_context_and_patch(calc, tmp_path):
    repo, sha = calc
    patch = subprocess.run(
        ["git", "-C", str(repo), "diff", sha["root"], sha["c1"]], capture_output=True, text=True, check=True
    ).stdout
    row = {
        "repo": "acme/calc",
        "instance_id": "acme__calc-7",
        "base_commit": sha["root"],
        "patch": patch,
        "test_patch": "",
        "problem_statement": "Division by zero crashes\nevaluate('1 / 0') raises",
        "hints_text": "Maybe check the divisor in @carol's evaluate?",
        "created_at": "2024-02-01T00:00:00Z",
        "version": "1.0",
        "FAIL_TO_PASS": json.dumps(["tests/test_eval.py::test_div0"]),
        "PASS_TO_PASS": "[]",
        "environment_setup_commit": sha["root"],
    }
    clones = tmp_path / "clones"
    (clones / "acme").mkdir(parents=True)
    (clones / "acme" / "calc").symlink_to(repo)
    rows = tmp_path / "tasks.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    doc = run_reader(PullReader([str(rows)], PullsConfig(repos=str(clones))))[0]
    assert doc.id == "pr:acme/calc#7" and doc.metadata["instance_id"] == "acme/calc#7"
    assert doc.metadata["instance_id_original"] == "acme__calc-7"
    # the issue and its hints (a non-participant's login scrubbed), what was read, the patch, the tests to pass
    marks = [
        "Issue:\nDivision by zero crashes",
        "Hints (the issue's discussion before the fix):\nMaybe check the divisor in user_1's evaluate?",
        "[read at base commit",
        "Files changed:",
        "--- calc/eval.py (modified, +2 -0)",
        "Tests that must pass after the change:\n- tests/test_eval.py::test_div0",
    ]
    order = [doc.text.index(s) for s in marks]
    assert order == sorted(order)
    assert "carol" not in doc.text and "opened this pull request" not in doc.text  # no author, no description
    flat = run_reader(PullReader([str(rows)]))[0].text  # no clone: flat, the same order
    assert [flat.index(s) for s in marks if "[read" not in s] == sorted(
        flat.index(s) for s in marks if "[read" not in s
    )


@pytest.mark.slow
def test_prep_same_documents_for_1_and_n_tasks_and_a_benchmark_clone_dropped_whatever_its_name(calc, tmp_path):
    """`midtrain prep pulls` with pulls.repos: curated end to end; a PR whose clone is a SWE-bench repository
    (its origin) is dropped though the record names another repository."""
    from sources_fixtures import read_documents, without_file_path

    from midtrain.sources.prep import prep

    repo, sha = calc
    clones = tmp_path / "clones"
    (clones / "acme").mkdir(parents=True)
    (clones / "acme" / "calc").symlink_to(repo)
    build_calc(clones / "someone" / "calc-fork", origin="https://github.com/django/django.git")
    (_, rec7), (_, rec8) = history_pulls(repo, "acme/calc")
    fork = dict(rec7, repo="someone/calc-fork", number=70)
    inputs = tmp_path / "prs"
    inputs.mkdir()
    for name, rec in (("a", rec7), ("b", rec8), ("c", fork), ("d", dict(rec8, number=9, base={"sha": "f" * 40}))):
        (inputs / f"{name}.jsonl").write_text(json.dumps(rec) + "\n")
    runs = {}
    for tasks in (1, 3):
        out = tmp_path / f"out{tasks}"
        stats = prep("pulls", [str(inputs)], out, overrides=[f"pulls.repos={clones}"], tasks=tasks)
        runs[tasks] = (sorted(without_file_path(read_documents(out)), key=lambda d: d["id"]), stats, out)
    docs, stats, out = runs[1]
    assert stats is not None
    assert docs == runs[3][0]
    assert [d["id"] for d in docs] == ["pr:acme/calc#7", "pr:acme/calc#8", "pr:acme/calc#9"]
    assert docs[0]["metadata"]["context_files"] == ["calc/eval.py", "tests/test_eval.py"]  # the default: files
    excluded = read_documents(out / "excluded" / "decontam")
    assert [(d["id"], d["metadata"]["curation_reason"]) for d in excluded] == [
        ("pr:someone/calc-fork#70", "swebench_repo")
    ]
    assert stats["skips"]["source/skip/no_base_commit"] == 1
    # the join ran as stages partitioned by repository: records to their repository's bucket, then rendered
    from midtrain.sources.buckets import bucket_of

    assert stats["documents_in"] == 4 and list(stats["inputs"]) == [str(inputs)]
    buckets = sorted(p.name for p in (runs[3][2] / "rows").iterdir())
    assert buckets == sorted({bucket_of(r, 3) for r in ("acme/calc", "someone/calc-fork")})
    # the data card splits the pull requests' tokens into what was read and what was edited
    from midtrain.pack.datacard import BYTES_PER_TOKEN, prep_card, to_markdown

    card = prep_card(out)
    parts = card["pull_request_parts"]
    per_byte = [round(len(d["text"].encode()) / BYTES_PER_TOKEN) / len(d["text"].encode()) for d in docs]
    for key, field in (
        ("context (files read at the base commit)", "context_bytes"),
        ("edits (commits: messages and diffs)", "edit_bytes"),
    ):
        want = sum(d["metadata"].get(field, 0) * pb for d, pb in zip(docs, per_byte))
        assert parts[key]["tokens"] == round(want) and want > 0
    assert sum(p["tokens"] for p in parts.values()) in range(card["tokens"] - 2, card["tokens"] + 3)
    assert "### Pull-request tokens: context vs edits" in to_markdown(card)


def test_swe_ablations_sweep_preps_pulls_again_without_and_with_more_context():
    from midtrain.sweep.plan import variant_plan
    from recipes.sweeps import sweep_swe_ablations

    cfg = sweep_swe_ablations()
    cfg.validate()
    for name, mode in (("pr_context_none", "none"), ("pr_context_imports", "files+imports")):
        plan = variant_plan(cfg, name)
        [step] = plan.prep
        argv = step.argv
        assert step.name == "prep_pulls" and argv[:4] == [
            "prep",
            "pulls",
            "pulls.repos=out/raw/repos",
            f"pulls.context={mode}",
        ]
        assert argv[argv.index("--input") + 1] == "out/raw/pulls"
        assert any(p.endswith(f"{name}/prep/pulls") for p in plan.inputs)
    assert not variant_plan(cfg, "full").prep  # the full mixture packs the pulls prepped with their context


def test_commit_diffs_past_the_document_size_are_not_held(tmp_path):
    repo = make_repo(tmp_path / "big", {"a.py": "A = 1\n"})
    git(repo, "checkout", "-q", "-b", "big")
    commit(repo, {"b.py": "".join(f"B{i} = {i}\n" for i in range(400))}, "Add a big module")
    commit(repo, {"a.py": "A = 2\n"}, "Change A")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "big", "-m", "Big change (#1)")
    reader = PullReader([str(repo)], PullsConfig(context="none", max_doc_bytes=2048))
    text = run_reader(reader)[0].text
    assert "[diff left out: past pulls.max_doc_bytes=2048]" in text and "Add a big module" in text  # message kept
    assert "+A = 2" in text  # a later diff that fits is kept
    assert (
        "+B399 = 399" not in text
        and {k: v.total for k, v in reader.stats.stats.items()}["skip/commit_diff_over_cap"] == 1
    )


def test_demo_pulls_read_their_clone_at_the_base_commit(tmp_path):
    """The demo's sample pull requests joined with the clone the demo builds: #12 (merged with the merge
    button) and #14 (open) read their changed files at their base commits, exactly as git shows them."""
    from midtrain.demo.inputs import SAMPLES, sample_pulls

    records, repos = sample_pulls(tmp_path / "pulls")
    clone = repos / "acme" / "minicalc"
    assert sample_pulls(tmp_path / "pulls") == (records, repos)  # built once
    shipped = [json.loads(line) for line in (SAMPLES / "pulls" / "sample_prs.jsonl").read_text().splitlines()]
    joined = [json.loads(line) for line in (records / "sample_prs.jsonl").read_text().splitlines()]

    # only the commit ids GitHub's API gives are set; everything else is the shipped record
    def no_ids(r: dict) -> dict:
        return {
            **{k: v for k, v in r.items() if k != "merge_commit_sha"},
            **{side: {k: v for k, v in r[side].items() if k != "sha"} for side in ("base", "head")},
        }

    assert [no_ids(j) for j in joined] == [no_ids(s) for s in shipped]
    assert [bool(j["head"].get("sha")) for j in joined] == [True, False, True]  # #13's branch is not in the clone
    for path in ("README.md", "minicalc/eval.py", "minicalc/ops.py", "tests/test_eval.py", "docs/usage.md"):
        assert show(clone, "main", path) == (SAMPLES / "repo" / path).read_text()  # main is the sample repository
    docs = {d.metadata["number"]: d for d in run_reader(PullReader([str(records)], PullsConfig(repos=str(repos))))}
    assert sorted(docs) == [12, 14]  # #13 is dependabot's
    pr12, pr14 = docs[12], docs[14]
    merge = joined[0]["merge_commit_sha"]
    assert git(clone, "rev-parse", f"{merge}^1").strip() == pr12.metadata["base_commit"]  # branched from main
    assert pr12.metadata["commits"] == git(clone, "rev-list", "--reverse", f"{merge}^1..{merge}^2").split()
    assert pr14.metadata["base_commit"] == merge
    for doc, paths in ((pr12, ["minicalc/eval.py", "tests/test_eval.py"]), (pr14, ["minicalc/ops.py"])):
        base = doc.metadata["base_commit"]
        blocks = read_blocks(doc.text)
        assert [p for _, p, _, _ in blocks] == paths == doc.metadata["context_files"]
        for short, path, why, body in blocks:
            assert (short, why) == (base[:12], "changed by this pull request")
            assert body == show(clone, base, path).rstrip("\n")
    assert "raise CalcError" not in read_blocks(pr12.text)[0][3]  # read before the fix, which its commit makes
    text = pr12.text
    order = [
        text.index(s)
        for s in [
            "Issue #11: evaluate('1/0') crashes",
            "[read at base commit",
            "Commit 1/2",
            "reviewed (CHANGES_REQUESTED)",
            "Commit 2/2",
            "reviewed (APPROVED)",
            f"Final state: merged (main <- fix-div0), merge commit {merge[:12]}",
        ]
    ]
    assert order == sorted(order)
    assert "[diff of docs/logo.png left out: binary]" in pr14.text and "alice-w" not in text


def test_demo_sweep_preps_the_demo_pulls_again_without_their_context(tmp_path, monkeypatch):
    from midtrain.demo.inputs import sample_pulls
    from midtrain.sweep.plan import variant_plan
    from recipes.sweeps import sweep_demo

    cfg = sweep_demo().validate()
    [step] = variant_plan(cfg, "pr_context_none").prep
    argv = step.argv
    assert step.name == "prep_pulls" and argv[:4] == [
        "prep",
        "pulls",
        "pulls.repos=.demo/prep/_inputs/pulls/repos",
        "pulls.context=none",
    ]
    assert not variant_plan(cfg, "all").prep and cfg.inputs["pulls"] == ".demo/prep/pulls"  # `all`: the demo's
    # the records and clone it names are the demo's (midtrain.demo.stages builds them in WORKDIR/prep/_inputs)
    monkeypatch.chdir(tmp_path)
    records, repos = sample_pulls(Path(".demo/prep/_inputs/pulls"))
    assert argv[argv.index("--input") + 1] == str(records) and argv[2] == f"pulls.repos={repos}"
    docs = run_reader(PullReader([str(records)], PullsConfig(repos=str(repos), context="none")))
    assert len(docs) == 2 and all("[read at" not in d.text and d.metadata["commits"] for d in docs)
