"""Dedup sharded over tasks (datatrove's exact signature -> finder -> filter stages, and MinHash): the same
documents whatever the number of tasks, finder tasks or input order; a relaunch after a crash resumes."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from curate_helpers import count, doc_row, repo_row, run_curation, stdlib, write_raw
from sources_fixtures import make_repo

from midtrain.cli import main
from midtrain.curate.stages import CurationConfig

BISECT, COLORSYS, SHLEX, TEXTWRAP, JSON_DEC = (
    stdlib(p) for p in ("bisect.py", "colorsys.py", "shlex.py", "textwrap.py", "json/decoder.py")
)
EXACT_ONLY = ["dedup.near=false", "redact.enabled=false"]
PATCHED_LEXER = SHLEX.replace("class shlex:", "class shlex:  # a locally patched copy\n    patched = True")


def raw_files() -> list[list[dict]]:
    """Six raw files: forks, vendored files and repeated documents, copies spread over the files both ways round;
    one edited document and one edited file (near duplicates)."""
    return [
        [repo_row("zz/tool", {"lex.py": SHLEX, "wrap.py": TEXTWRAP, "util.py": BISECT})],
        [
            doc_row("PR: fix\n" + COLORSYS, "pr-9"),
            repo_row("aa/other", {"vendor/decoder.py": JSON_DEC, "enc.py": stdlib("json/encoder.py")}),
        ],
        [repo_row("mm/tool-fork", {"lex.py": SHLEX, "wrap.py": TEXTWRAP, "util.py": BISECT})],
        [
            doc_row("PR: fix\n" + COLORSYS.replace("\n\n", "\n  \n"), "pr-1"),
            doc_row("PR: other\n" + stdlib("fnmatch.py"), "pr-2"),
        ],
        [
            repo_row("bb/app", {"decoder.py": JSON_DEC, "own.py": stdlib("string.py")}),
            doc_row("PR: fix\n" + COLORSYS, "pr-5"),
        ],
        [
            repo_row("cc/vendoring", {"third_party/lex.py": SHLEX, "main.py": stdlib("heapq.py")}),
            doc_row("PR: fix (v2)\n" + COLORSYS.replace("Return", "Give back"), "pr-0"),
        ],
        [repo_row("dd/patched", {"lexer.py": PATCHED_LEXER, "cal.py": stdlib("calendar.py")})],
    ]


def output_lines(documents: Path) -> list[str]:
    """Every output document's JSON line, sorted (the set of documents, byte for byte)."""
    lines: list[str] = []
    for f in sorted(documents.rglob("*.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            lines.extend(line for line in fh if line.strip())
    return sorted(lines)


def run(tmp: Path, name: str, tasks: int, overrides: list[str], reverse: bool = False):
    files = raw_files()
    write_raw(tmp / name / "raw", *(files[::-1] if reverse else files))
    cfg = CurationConfig().apply_overrides(overrides)
    prep = tmp / name / "prep"
    counts = run_curation(cfg, "repo", tmp / name / "raw", prep, tasks)
    return output_lines(prep / "documents"), counts, prep


@pytest.mark.slow
def test_one_and_four_tasks_keep_the_same_copies(tmp_path):
    settings = ["redact.enabled=false"]  # exact and near dedup on
    one, one_counts, _ = run(tmp_path, "one", 1, settings)
    four, four_counts, prep4 = run(tmp_path, "four", 4, settings)
    # the input files in the other order, one task, three finder tasks: still the same copies kept
    rev, _, _ = run(tmp_path, "rev", 1, settings + ["dedup.finder_tasks=3"], reverse=True)
    assert four == one and rev == one
    assert sorted((prep4 / "work" / "dedup" / "exact_signatures").iterdir())[-1].name == "0003"  # 4 finder tasks

    docs = [json.loads(line) for line in one]
    ids = sorted(d["id"] for d in docs)
    # one of the three equal PRs (whitespace aside) and one of the two identical repositories survive
    assert sum(i.startswith("pr-") and i != "pr-2" for i in ids) == 1  # the edited one (pr-0) included
    assert ("repo:zz/tool" in ids) != ("repo:mm/tool-fork" in ids)
    for counts in (one_counts, four_counts):
        assert count(counts, "dedup", "dropped_exact_duplicate") == 2
        assert count(counts, "dedup", "dropped_duplicate_repo") == 1
        # the vendored decoder and lexer are cut from one repository each (which one: the same for any task count;
        # every repository holds enough of its own code not to be dropped as a fork for it)
        assert count(counts, "dedup", "removed_exact_duplicate_file") == 2
        assert count(counts, "exact find", "exact_duplicates") == 2 + 3 + 2
        assert count(counts, "dedup", "dropped_near_duplicate") == 1
        assert count(counts, "dedup", "removed_near_duplicate_file") == 1


@pytest.mark.slow
def test_a_relaunch_after_a_crashed_finder_task_resumes(tmp_path):
    """Finder task 1 of 2 'crashed' (no completion marker, no output) and nothing after it ran: the relaunch
    reruns that task and the later stages only, and gives the same documents as an uninterrupted run."""
    shared = {"lex.py": SHLEX, "wrap.py": TEXTWRAP}
    repos = [
        make_repo(tmp_path / "src" / f"r{i}", {**shared, f"own{i}.py": f"VALUE = {i}\n" + BISECT[: 200 * i]})
        for i in range(4)
    ]
    args = [
        "prep",
        "repos",
        "license.enabled=false",
        *EXACT_ONLY,
        "--input",
        *map(str, repos),
        "--tasks",
        "2",
        "--output",
    ]
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    assert main([*args, str(out)]) == 0 and main([*args, str(fresh)]) == 0
    logs = out / "logs"
    [finder] = [p for p in logs.iterdir() if p.name.endswith("_dedup_exact")]
    later = [p for p in logs.iterdir() if p.name.endswith("_dedup_filter") or p.name == "stats"]
    (finder / "completions" / "00001").unlink()
    shutil.rmtree(out / "work" / "dedup" / "exact" / "00001", ignore_errors=True)
    for stage in later:
        shutil.rmtree(stage / "completions")
    shutil.rmtree(out / "documents")
    (out / "stats.json").unlink()
    [sig] = [p for p in (out / "work" / "dedup" / "exact_signatures").rglob("*.c4_sig") if p.stat().st_size][:1]
    sig_mtime, kept_marker = sig.stat().st_mtime_ns, (finder / "completions" / "00000").stat().st_mtime_ns

    assert main([*args, str(out)]) == 0
    assert sig.stat().st_mtime_ns == sig_mtime  # the signature stage was not rerun
    assert (finder / "completions" / "00000").stat().st_mtime_ns == kept_marker  # nor finder task 0
    assert (finder / "completions" / "00001").exists()
    assert output_lines(out / "documents") == output_lines(fresh / "documents")
    stats = json.loads((out / "stats.json").read_text())
    assert stats["documents_out"] == 1 and stats["complete"]
    assert sum(v for k, v in stats["drops"].items() if "duplicate" in k) == 3


def test_the_finder_refuses_fewer_tasks_than_hash_ranges(tmp_path):
    """Signatures split for 3 finder tasks, finder run as 1 task: it would miss two ranges, so it stops."""
    from datatrove.data import Document

    from midtrain.curate.dedup import ExactUnitFind, ExactUnitSignature

    docs = [Document(text=f"document number {i % 5} " * 20, id=str(i)) for i in range(20)]
    list(ExactUnitSignature(str(tmp_path / "sigs"), 10, 3).run(iter(docs), rank=0, world_size=1))
    assert sorted(p.name for p in (tmp_path / "sigs").iterdir()) == ["0000", "0001", "0002"]
    with pytest.raises(ValueError, match="more than 1 finder tasks"):
        list(ExactUnitFind(str(tmp_path / "sigs"), str(tmp_path / "dups")).run(rank=0, world_size=1))
    found = ExactUnitFind(str(tmp_path / "sigs"), str(tmp_path / "dups"))
    for rank in range(3):
        list(found.run(rank=rank, world_size=3))
    assert found.stats["exact_duplicates"].total == 15  # 20 documents, 5 distinct texts
