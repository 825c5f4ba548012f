"""The data card of a real `midtrain prep` output: composition by source, language, file kind, repository,
removed/redacted counts, bot share and lengths, as Markdown, JSON and PNG."""

from __future__ import annotations

import json

from sources_fixtures import commit, make_repo

from midtrain.cli import main
from midtrain.pack.datacard import file_kind


def test_file_kinds():
    assert [
        file_kind(p)
        for p in (
            "src/app.py",
            "tests/test_app.py",
            "README.md",
            "pyproject.toml",
            "uv.lock",
            "docs/logo.svg",
            "data/rows.csv",
        )
    ] == ["code", "tests", "docs", "config", "lock", "data", "data"]


def test_prep_data_card(tmp_path, capsys):
    repo = make_repo(
        tmp_path / "proj",
        {
            "src/app.py": "def add(a, b):\n    return a + b\n",
            "tests/test_app.py": "from app import add\n\ndef test_add():\n    assert add(1, 2) == 3\n",
        },
    )
    commit(
        repo,
        {
            "uv.lock": "[[package]]\nname = 'x'\n" * 20,
            "src/app.py": "def add(a, b):\n    return b + a\n",
            "README.md": "# proj\n\nMail maria.garcia7@globex.io\n",
        },
        "swap; lock",
    )
    commit(
        repo,
        {"pyproject.toml": "[project]\nname = 'proj'\n"},
        "Bump deps",
        author=("dependabot[bot]", "49699333+dependabot[bot]@users.noreply.github.com"),
    )
    out = tmp_path / "prep"
    assert main(["prep", "commits", "commits.bots=mark", "--input", str(repo), "--output", str(out)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "# Data card:" in printed and "Tokens by file kind" in printed
    card = json.loads((out / "datacard.json").read_text())
    assert (out / "datacard.md").read_text().startswith("# Data card:")
    assert (out / "datacard.png").read_bytes()[:4] == b"\x89PNG"
    assert card["documents"] == 1 and not card["tokens_exact"] and set(card["by_source"]) == {"commit"}
    kinds = card["by_file_kind"]
    assert {"code", "tests", "docs", "config", "commit message"} <= set(kinds) and "lock" not in kinds
    assert abs(sum(v["share"] for v in kinds.values()) - 1) < 1e-6
    assert "Python" in card["by_language"] and list(card["top_repositories"]) == ["proj"]
    assert card["removed_files_by_reason"] == {"lock_file": 1}
    assert card["redactions_by_kind"] == {"email": 1}
    assert 0 < card["bot_share"] < 1
    assert any(k.endswith("skip/file_lock_file") for k in card["skips"])
    assert sum(card["length_histograms"]["commit"]) == 1


def test_a_bad_line_is_counted_not_fatal(tmp_path):
    """The card reads documents as every other stage does: a line that is not JSON, or a file cut short, is
    counted and skipped; the documents around it still count."""
    import gzip

    from midtrain.pack.datacard import prep_card

    docs = tmp_path / "prep" / "documents"
    docs.mkdir(parents=True)
    good = {"text": "def f():\n    return 1\n", "id": "repo:o/r", "metadata": {"source": "repo"}}
    (docs / "00000.jsonl").write_text(json.dumps(good) + "\n{not json\n" + json.dumps({**good, "id": "b"}) + "\n")
    whole = gzip.compress((json.dumps({**good, "id": "c"}) + "\n").encode() * 50)
    (docs / "00001.jsonl.gz").write_bytes(whole[: len(whole) // 2])  # a truncated gzip
    card = prep_card(tmp_path / "prep")
    assert card["unreadable_records"] == {"bad_json": 1, "unreadable_file": 1}
    assert card["documents"] == 2  # the lines around the bad one
