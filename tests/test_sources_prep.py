"""`midtrain prep` end to end: the CLI, stats.json, determinism, resume, multi-task runs, Slurm wiring, demo."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sources_fixtures import REPO_ROOT, SAMPLES, git, make_repo, read_documents, without_file_path

from midtrain.cli import main
from midtrain.curate.stages import CurationConfig

PULLS = SAMPLES / "pulls" / "sample_prs.jsonl"
try:  # every curation step off, for tests about the source stage only (curation has its own tests)
    from midtrain.curate.stages import STEP_NAMES

    NO_CURATION = [f"{s}.enabled=false" for s in STEP_NAMES]
except ImportError:
    NO_CURATION = []


def source_drops(stats: dict) -> dict:
    return {k: v for k, v in stats["drops"].items() if k.startswith("source/")}


def prep(*argv: str | Path) -> int:
    return main(["prep", *map(str, argv)])


def test_pulls_end_to_end_stats_and_interface(tmp_path, capsys):
    """The whole stage chain (reader, curation, stats) on the sample."""
    out = tmp_path / "pulls"
    assert prep("data_prep/pulls.py", "--input", PULLS, "--output", out) == 0  # the pipeline file names the source
    assert "3 records in -> " in capsys.readouterr().out
    raw = read_documents(out / "raw")
    assert len(raw) == 2
    for d in raw:
        m = d["metadata"]
        assert m["source"] == "pr" and m["repo"] == "acme/minicalc" and m["license"] == "MIT" and m["id"] == d["id"]
    docs = read_documents(out)
    assert {d["id"] for d in docs} <= {d["id"] for d in raw} and sorted((out / "documents").iterdir())
    stats = json.loads((out / "stats.json").read_text())
    assert stats["complete"] and stats["source"] == "pulls"
    assert (stats["documents_in"], stats["documents_read"], stats["documents_out"]) == (3, 2, len(docs))
    assert stats["bytes_read"] == sum(len(d["text"].encode()) for d in raw)
    assert stats["bytes_out"] == sum(len(d["text"].encode()) for d in docs)
    assert source_drops(stats) == {"source/dropped/bot_author": 1}
    assert stats["drops_total"] == sum(stats["drops"].values()) >= 1
    assert stats["skips"]["source/skip/bot_comment"] == 2
    assert stats["settings"]["curation"] == CurationConfig().to_dict()  # the resolved curation config
    assert stats["settings"]["source_config"]["max_patch_bytes"] == 100_000
    assert list(stats["stages"])[0] == "source" and all(s.startswith("curate_") for s in list(stats["stages"])[1:])
    # what was dropped on purpose is kept aside with its reason (nothing disappears silently)
    [excluded] = read_documents(out / "excluded" / "source")
    assert excluded["metadata"]["filter_reason"] == "bot_author" and "dependabot" in excluded["text"]
    # by the curation steps' writer: one file a task, gzip without a timestamp (the same run, the same bytes)
    [written] = (out / "excluded" / "source").iterdir()
    assert written.name == "00000.jsonl.gz" and written.read_bytes()[4:8] == b"\0\0\0\0"  # gzip's MTIME field


@pytest.mark.slow
def test_deterministic_output_resume_and_changed_settings(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    args: list[str | Path] = ["traces", "traces.format=plain", "--input", SAMPLES / "traces", "--output"]
    assert prep(*args, a) == 0 and prep(*args, b) == 0
    first = read_documents(a)
    # same input -> identical documents (a datatrove reader in curation may record the raw file's path)
    assert without_file_path(first) == without_file_path(read_documents(b))
    assert read_documents(a / "raw") == read_documents(b / "raw")  # the reader's output, byte for byte
    assert [p.name for p in sorted((a / "raw").iterdir())] == ["00000.jsonl.gz"]
    # a relaunch resumes: completed tasks are skipped (datatrove completion markers), outputs untouched
    mtime = (a / "raw" / "00000.jsonl.gz").stat().st_mtime_ns
    assert prep(*args, a) == 0
    assert (a / "raw" / "00000.jsonl.gz").stat().st_mtime_ns == mtime
    # other settings into the same directory would mix outputs: refused, naming what changed
    capsys.readouterr()
    assert prep("traces", "traces.only_resolved=true", "--input", SAMPLES / "traces", "--output", a) == 2
    assert "source_config" in capsys.readouterr().err
    assert (
        prep(
            "traces",
            "traces.only_resolved=true",
            *NO_CURATION,
            "--input",
            SAMPLES / "traces",
            "--output",
            a,
            "--overwrite",
        )
        == 0
    )
    docs = read_documents(a / "raw")
    # the canonical instance id (midtrain/formats/instance_id.py), the spelling as written kept beside it
    assert sorted(d["metadata"]["instance_id"] for d in docs) == ["acme/minicalc#16"]
    assert sorted(d["metadata"]["instance_id_original"] for d in docs) == ["acme__minicalc-16"]
    stats = json.loads((a / "stats.json").read_text())
    assert source_drops(stats) == {"source/dropped/resolved_unknown": 3, "source/dropped/unresolved": 1}


@pytest.mark.slow
def test_multi_task_local_run_matches_single_task(tmp_path):
    repos = [
        make_repo(
            tmp_path / f"r{i}",
            {"README.md": f"repo {i}\n", f"pkg{i}/__init__.py": "", f"pkg{i}/core.py": f"VALUE = {i}\n"},
        )
        for i in range(3)
    ]
    one, many = tmp_path / "one", tmp_path / "many"
    assert prep("repos", *NO_CURATION, "--input", *repos, "--output", one) == 0
    assert prep("repos", *NO_CURATION, "--input", *repos, "--output", many, "--tasks", "2", "--workers", "2") == 0
    assert sorted((many / "raw").iterdir()) == [many / "raw" / "00000.jsonl.gz", many / "raw" / "00001.jsonl.gz"]
    key = lambda d: d["id"]  # noqa: E731
    assert sorted(read_documents(one / "raw"), key=key) == sorted(read_documents(many / "raw"), key=key)
    assert len(read_documents(many / "raw")) == 3
    stats = json.loads((many / "stats.json").read_text())
    assert stats["documents_in"] == 3 and stats["documents_read"] == 3 and stats["documents_out"] == 3


def test_a_pipeline_file_given_as_source_is_the_one_that_runs(tmp_path, capsys):
    """`midtrain prep mypipes/pulls.py`: the user's file is imported and its pipeline() runs (its stem still names
    the reader config); a missing file is an error naming it."""
    pipes = tmp_path / "mypipes"
    pipes.mkdir()
    (pipes / "pulls.py").write_text(
        "from datatrove.pipeline.filters import LambdaFilter\n"
        "from data_prep.pulls import pipeline as builtin\n\n"
        "def pipeline(inputs, cfg, raw_dir, report_dir, exclusion_dir=None):\n"
        "    reader, writer = builtin(inputs, cfg, raw_dir, report_dir, exclusion_dir)\n"
        "    return [reader, LambdaFilter(lambda doc: 'ZeroDivisionError' not in doc.text), writer]\n"
    )
    out = tmp_path / "out"
    assert prep(pipes / "pulls.py", "--input", PULLS, "--output", out, *NO_CURATION) == 0
    builtin_out = tmp_path / "builtin"
    assert prep("pulls", "--input", PULLS, "--output", builtin_out, *NO_CURATION) == 0
    mine, theirs = read_documents(out / "raw"), read_documents(builtin_out / "raw")
    assert 0 < len(mine) < len(theirs)  # the custom filter ran
    assert json.loads((out / "prep.json").read_text())["pipeline_file"] == str(pipes / "pulls.py")
    capsys.readouterr()
    assert prep(tmp_path / "nothere" / "pulls.py", "--input", PULLS, "--output", tmp_path / "x") != 0
    assert f"pipeline file {tmp_path / 'nothere' / 'pulls.py'} does not exist" in capsys.readouterr().err


def test_unreadable_inputs_fail_with_a_message_naming_them(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "core.log").write_bytes(b"\x7fELF\x00\x00binary")
    assert prep("buildlogs", *NO_CURATION, "--input", logs, "--output", tmp_path / "o1") == 1
    err = capsys.readouterr().err
    assert f"nothing could be read from: {logs}" in err and "binary_file" in err
    stats = json.loads((tmp_path / "o1" / "stats.json").read_text())
    assert stats["unreadable_inputs"] == [str(logs)] and source_drops(stats) == {"source/error/binary_file": 1}
    assert prep("pulls", "--input", tmp_path / "missing.jsonl", "--output", tmp_path / "o2") == 1
    assert f"input {tmp_path / 'missing.jsonl'}: no such file or directory" in capsys.readouterr().err
    # one bad repository among good ones: the job goes on, the bad one is counted and named
    good = make_repo(tmp_path / "good", {"a.py": "x = 1\n"})
    notrepo = tmp_path / "empty_dir"
    notrepo.mkdir()
    assert prep("repos", *NO_CURATION, "--input", good, notrepo, "--output", tmp_path / "o3") == 1
    stats = json.loads((tmp_path / "o3" / "stats.json").read_text())
    assert stats["documents_read"] == 1 and stats["unreadable_inputs"] == [str(notrepo)]
    assert stats["errors"][0]["reason"] == "no_usable_files"


def test_overrides_reach_the_reader_and_bad_ones_name_the_field(tmp_path, capsys):
    repo = make_repo(tmp_path / "r", {"README.md": "hi\n", "big.py": "x = 1\n" * 100})
    out = tmp_path / "o"
    assert prep("repos", "repos.max_file_bytes=50", *NO_CURATION, "--input", repo, "--output", out) == 0
    [doc] = read_documents(out / "raw")
    assert doc["metadata"]["files"] == ["README.md"]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["skips"] == {"source/skip/too_large": 1}
    assert not any(stats["settings"]["curation_steps"].values())  # curation overrides reached CurationConfig
    assert prep("repos", "repos.max_file_byte=50", "--input", repo, "--output", tmp_path / "o2") == 2
    assert "max_file_byte" in capsys.readouterr().err
    assert prep("nosuch", "--input", repo, "--output", tmp_path / "o3") == 2


def test_slurm_executor_wiring_dry_run(tmp_path, capsys):
    site = tmp_path / "site.yaml"
    site.write_text(
        "prep:\n  partition: cpu-small\n  time: '02:00:00'\n  cpus_per_task: 2\n  mem_per_cpu_gb: 3\n  tasks: 8\n"
    )
    out = tmp_path / "o"
    assert (
        prep(
            "pulls",
            "--input",
            PULLS,
            "--output",
            out,
            "--executor",
            "slurm",
            "--site",
            site,
            "--time",
            "00:30:00",
            "--dry-run",
        )
        == 0
    )
    text = capsys.readouterr().out
    stages = text.split("# ---- stage ")[1:]
    names = [s.split(" ", 1)[0] for s in stages]
    assert names[0] == "source" and names[-1] == "stats" and all(n.startswith("curate_") for n in names[1:-1])
    src = stages[0]
    for line in [
        "#SBATCH --partition=cpu-small",
        "#SBATCH --time=00:30:00",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --mem-per-cpu=3G",
        "#SBATCH --array=0-7",
        "launch_pickled_pipeline",
    ]:
        assert line in src, line
    assert "#SBATCH --array=0-0" in stages[-1]  # the stats stage is a single task
    assert not (out / "documents").exists()  # nothing ran


@pytest.mark.slow
def test_demo_stage_runs_every_source_and_skips_on_rerun(tmp_path, monkeypatch, caplog):
    """Every source prepped; a rerun rewrites nothing; an edited sample trace is prepared again (it was skipped:
    the demo reported the data as it was before the edit), the other sources left as they are."""
    from midtrain.demo import stages
    from midtrain.demo.stages import SOURCES, prep_stage

    samples = tmp_path / "samples"  # the demo's sample inputs, as a user's checkout has them, to edit below
    shutil.copytree(stages.SAMPLES, samples, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]"))
    monkeypatch.setattr(stages, "SAMPLES", samples)
    work = tmp_path / "work"
    result = Path(prep_stage(work))
    for source in SOURCES:
        stats = json.loads((result / source / "stats.json").read_text())
        assert stats["complete"] and stats["documents_out"] >= 1, source
    from midtrain.demo.inputs import project_repo

    if project_repo():  # this ~1 MB repository is split so that the validation split holds repository text too
        assert json.loads((result / "repos" / "stats.json").read_text())["documents_out"] >= 2
    logs = {d["id"] for d in read_documents(result / "buildlogs")}
    assert {"buildlog:make.log", "buildlog:pytest.log", "buildlog:pip.log", "buildlog:cargo_build.log"} <= logs
    traces = read_documents(result / "traces")
    assert all(d["metadata"]["loss_spans"] for d in traces)
    # the sample pull requests are joined with their clone: both read their changed files at the base commit
    assert [bool(d["metadata"].get("context_files")) for d in read_documents(result / "pulls")] == [True, True]
    mtimes = {s: (result / s / "stats.json").stat().st_mtime_ns for s in SOURCES}
    prep_stage(work)
    assert mtimes == {s: (result / s / "stats.json").stat().st_mtime_ns for s in SOURCES}
    trace = samples / "traces" / "acme__minicalc-14.traj.json"
    data = json.loads(trace.read_text())
    said = next(m for m in data["messages"] if m["role"] == "assistant")
    said["content"] = f"{said['content']}\nEDITED-BY-THE-TEST"
    trace.write_text(json.dumps(data))
    with caplog.at_level("WARNING", logger="midtrain.demo.prep"):
        prep_stage(work)
    assert "prep traces: " in caplog.text and "preparing it again" in caplog.text, caplog.text
    assert any("EDITED-BY-THE-TEST" in d["text"] for d in read_documents(result / "traces"))
    after = {s: (result / s / "stats.json").stat().st_mtime_ns for s in SOURCES}
    assert [s for s in SOURCES if after[s] != mtimes[s]] == ["traces"]


def test_demo_fallback_sample_repository_has_history(tmp_path):
    """Outside a git checkout the demo builds a real git repository from the sample for repos and commits."""
    from midtrain.demo.inputs import sample_git_repo
    from midtrain.sources.commits import CommitReader
    from midtrain.sources.repos import RepoReader

    repo = sample_git_repo(tmp_path / "sample")
    assert sample_git_repo(tmp_path / "sample") == repo  # built once
    # exactly the sample's files: bytecode that running its tests leaves beside it is not committed
    tracked = git(REPO_ROOT, "ls-files", "data_prep/samples/repo").split()
    assert sorted(git(repo, "ls-files").split()) == sorted(p.removeprefix("data_prep/samples/repo/") for p in tracked)
    [doc] = list(RepoReader([str(repo)]).run())
    assert doc.metadata["license"] == "MIT" and doc.metadata["files"][:2] == ["README.md", "docs/usage.md"]
    order = doc.metadata["files"]
    assert order.index("minicalc/errors.py") < order.index("minicalc/parse.py") < order.index("minicalc/eval.py")
    [hist] = list(CommitReader([str(repo)]).run())
    assert len(hist.metadata["commits"]) == 2 and "Demo Author" not in hist.text


@pytest.mark.slow
def test_curation_dropping_every_document_is_a_warning_not_a_failure(tmp_path, capsys):
    """All of an input is contaminated (its repository is a benchmark's): exit 0 naming the drop reasons, and
    `midtrain pack` skips the empty prep directory instead of stopping a chain of jobs."""
    bench = tmp_path / "bench_repos.txt"
    bench.write_text("acme/minicalc\n")
    out = tmp_path / "pulls"
    assert prep("pulls", "--input", PULLS, "--output", out, f"decontam.repo_list={bench}", "dedup.enabled=false") == 0
    err = capsys.readouterr().err
    assert "warning: curation dropped every document" in err and "dropped_swebench_repo" in err
    stats = json.loads((out / "stats.json").read_text())
    assert stats["documents_out"] == 0 and stats["unreadable_inputs"] == []
    # pack: the empty prep dir alone is an error naming it; beside a non-empty one it is skipped
    assert main(["pack", "--input", str(out), "--output", str(tmp_path / "shards")]) == 1
    assert "kept none" in capsys.readouterr().err
    import random

    from pack_helpers import repo_doc, write_prep

    other = write_prep(tmp_path / "repos", [repo_doc(i, random.Random(i)) for i in range(3)])
    assert (
        main(["pack", "--input", str(out), str(other), "--output", str(tmp_path / "shards"), "--seq-length", "1024"])
        == 0
    )
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert list(manifest["sources"]) == ["repo"]


def test_a_pull_request_record_of_nulls_is_a_bad_record_not_a_document(tmp_path):
    from midtrain.sources.pull_config import PullsConfig
    from midtrain.sources.pulls import PullReader

    sample = json.loads(PULLS.read_text().splitlines()[0])
    nulls = dict.fromkeys(sample)
    records = [nulls, dict(nulls, files=[dict.fromkeys(sample["files"][0])], user={"login": None}), sample]
    path = tmp_path / "prs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    reader = PullReader([str(path)], PullsConfig())
    docs = list(reader.run())
    assert [d.metadata["number"] for d in docs] == [sample["number"]]  # today: a document of "None"s too
    assert {k: v.total for k, v in reader.stats.stats.items()}["error/bad_record"] == 2


def test_a_rerun_on_changed_inputs_is_refused_unless_overwrite(tmp_path, capsys):
    inputs, out = tmp_path / "prs", tmp_path / "out"
    inputs.mkdir()
    (inputs / "a.jsonl").write_text(PULLS.read_text())
    args = ["pulls", *NO_CURATION, "--input", inputs, "--output", out]
    assert prep(*args) == 0
    before = json.loads((out / "stats.json").read_text())["documents_in"]
    assert prep(*args) == 0  # unchanged inputs: a resume
    more = [dict(json.loads(line), number=100 + i) for i, line in enumerate(PULLS.read_text().splitlines())]
    (inputs / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in more))
    capsys.readouterr()
    assert prep(*args) == 2  # today: "3 records in", the new file left out
    err = capsys.readouterr().err
    assert "inputs changed" in err and f"{inputs}: 2 files, was 1" in err and "--overwrite" in err, err
    assert not (out / "stats.json").exists() or json.loads((out / "stats.json").read_text())["documents_in"] == before
    assert prep(*args, "--overwrite") == 0
    assert json.loads((out / "stats.json").read_text())["documents_in"] == 2 * before
