"""One held-out decision per run (issue #54): tests/data/run_split's instances, in SWE-agent issue runs,
OpenAI rows, SWE-bench task rows and GitHub pull requests spelled every way, plus a git history holding two
fix commits, go through the real prep, `midtrain split`'s decision and real packs. Each test is one case of the
issue; the held-out sets come from the rule, the fixture's README says which numbers it picked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sft_helpers import probe_cfg, write_documents

from midtrain.cli import main

DATA = Path(__file__).parent / "data" / "run_split"
NO_CURATION = [f"{s}.enabled=false" for s in ("license", "decontam", "quality", "redact", "dedup")]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Dev",
    "GIT_AUTHOR_EMAIL": "dev@example.com",
    "GIT_COMMITTER_NAME": "Dev",
    "GIT_COMMITTER_EMAIL": "dev@example.com",
    "GIT_AUTHOR_DATE": "2024-01-02T03:04:05Z",
    "GIT_COMMITTER_DATE": "2024-01-02T03:04:05Z",
}
FUNCTIONS = (31, 33, 60, 64, 81)
# a commit's message body long enough that each commit is its own document at commits.max_doc_bytes=1024
BODY = " ".join(
    f"Division by zero in op{n} raised ZeroDivisionError; CalcError says what went wrong." for n in range(7)
)


def _prep(source: str, inp: Path, out: Path, *overrides: str) -> Path:
    assert main(["prep", source, *NO_CURATION, *overrides, "--input", str(inp), "--output", str(out)]) == 0
    return out


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def _guard(repo: Path, n: int, message: str, notes: bool = False) -> str:
    """Commit task n's fix (the fixture's patch(n) lines); ``notes``: a second file too (another change's key)."""
    f = repo / "calc.py"
    f.write_text(f.read_text().replace(f"    return {n} / x\n", f"    return safe_div({n}, x)\n"))
    if notes:
        (repo / "NOTES.md").write_text(f"op{n} is guarded\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, "-m", BODY)
    return _git(repo, "rev-parse", "HEAD").strip()


def _history(repo: Path) -> dict[int, str]:
    """acme/calc's history: the functions, then #64's merge commit (with a note: its patch differs), #81's
    fix exactly as its task row's patch, and #33's (a task that trains)."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text("".join(f"def op{n}(x):\n    return {n} / x\n\n\n" for n in FUNCTIONS))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "Add the calculator", "-m", BODY)
    _git(repo, "remote", "add", "origin", "https://github.com/acme/calc")
    return {
        64: _guard(repo, 64, "Merge pull request #64: guard op64", notes=True),
        81: _guard(repo, 81, "Guard op81 against zero"),
        33: _guard(repo, 33, "Guard op33 against zero"),
    }


def _repo_docs() -> list[dict]:
    def doc(repo: str, i: int) -> dict:
        text = f"<|repo_name|>{repo}\n<|file_sep|>m{i}.py\ndef f{i}(x):\n    return x + {i}\n"
        return {"text": text, "id": f"repo:{repo}:{i}", "metadata": {"source": "repo", "repo": repo}}

    return [doc(r, i) for r in ("acme/calc", "acme/lib", "acme/web", "org/r0", "org/r2") for i in range(2)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from midtrain.formats.run_split import decide_once
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack

    tmp = tmp_path_factory.mktemp("run_split")
    shas = _history(tmp / "git" / "calc")
    pulls_in = tmp / "pulls_in"
    shutil.copytree(DATA / "pulls", pulls_in)
    prs = pulls_in / "prs.jsonl"
    prs.write_text(prs.read_text().replace("FIX_SHA", shas[64]))
    prep = {
        "traces": _prep("traces", DATA / "traces", tmp / "prep" / "traces"),
        "pulls": _prep("pulls", pulls_in, tmp / "prep" / "pulls"),
        "commits": _prep("commits", tmp / "git" / "calc", tmp / "prep" / "commits", "commits.max_doc_bytes=1024"),
        "repos": write_documents(tmp / "prep" / "repos", _repo_docs()),
    }
    split = decide_once(tmp / "split.json", list(prep.values()), 0.1, 0.2, "test")
    # the pack's own fractions differ from the split's: the split file's apply
    cfg = PackConfig(seq_length=1024, valid_fraction=0.0, heldout_fraction=0.0, tokenize_tasks=1, split=split.path)
    manifest = pack(cfg, list(prep.values()), tmp / "shards").manifest
    return {"tmp": tmp, "prep": prep, "split": split, "manifest": manifest, "shas": shas, "pulls_in": pulls_in}


def _docs(prep_dir: Path) -> list[dict]:
    from midtrain.formats.trace_split import iter_documents

    return list(iter_documents(prep_dir))


def _sides(shards: Path) -> tuple[set[str], set[str]]:
    from midtrain.formats.trace_split import shard_doc_ids

    return shard_doc_ids(shards, "train"), shard_doc_ids(shards, "valid")


def _by_original(prep_dir: Path) -> dict[str, str]:
    """{the producer's spelling (or the file's stem): document id} of a trace or pulls prep."""
    return {str(d["metadata"].get("instance_id_original") or d["id"]): d["id"] for d in _docs(prep_dir)}


def test_case1_swe_agent_issue_runs_are_the_task_of_their_pull_request(run):
    from midtrain.formats.instance_id import canonical_instance
    from midtrain.formats.trace_split import instance_heldout

    assert canonical_instance("Acme__Calc-i30") == "acme/calc#30" == canonical_instance("acme__calc-i30")
    # the fixture's premise: each issue alone draws the other way from the pull request that resolved it
    assert instance_heldout("acme/calc#60", 0.1) and not instance_heldout("acme/calc#30", 0.1)
    assert instance_heldout("acme/calc#82", 0.1) and not instance_heldout("acme/calc#31", 0.1)
    split = run["split"]
    assert split.links == {"acme/calc#30": "acme/calc#60", "acme/calc#82": "acme/calc#31"}
    ids = _by_original(run["prep"]["traces"])
    train, valid = _sides(run["tmp"] / "shards")
    assert ids["Acme__Calc-i30"] in valid  # with the task row of PR #60 (issue_numbers ["30"])
    assert ids["Acme__Calc-i82"] in train and ids["acme/calc#31"] in train  # trains with PR #31 (linked_issues)
    assert "pr:Acme/Calc#31" in train and "pr:acme/calc#60" in valid
    assert split.heldout("acme/calc#30") and not split.heldout("acme/calc#82")


def test_case2_validation_repositories_are_one_set_for_every_source(run):
    from midtrain.formats.run_split import doc_repo

    split, manifest = run["split"], run["manifest"]
    assert "acme/web" in split.validation  # the fixture's premise (README)
    assert manifest["split"]["validation_repositories"] == sorted(split.validation)
    train, valid = _sides(run["tmp"] / "shards")
    repo_of = {d["id"]: doc_repo(d) for p in run["prep"].values() for d in _docs(p)}
    for doc_id, repo in repo_of.items():
        if repo in split.validation:  # repository files and pull requests alike
            assert doc_id in valid, doc_id
        elif doc_id.startswith("repo:") and doc_id not in set(split.fix_docs):
            assert doc_id in train, doc_id  # a training repository's code all trains
    web = {d for d, r in repo_of.items() if r == "acme/web"}
    assert {d.split(":")[0] for d in web} == {"repo", "pr"} and web <= valid
    # the commits' one repository keeps training data: a source's only repository never validates
    assert manifest["valid_split"]["commit"]["by"] == "document"


def test_case3_a_pack_given_the_split_file_holds_out_at_its_fraction(run, caplog):
    from midtrain.formats.run_split import decide_once
    from midtrain.formats.trace_split import instance_heldout
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack

    tmp = run["tmp"]
    assert instance_heldout("acme/calc#32", 0.2) and not instance_heldout("acme/calc#32", 0.1)  # premise
    probe_split = decide_once(tmp / "split20.json", list(run["prep"].values()), 0.2, 0.0, "probe at 0.2")
    only_pulls = [run["prep"]["pulls"]]
    cfg = PackConfig(seq_length=1024, valid_fraction=0.0, heldout_fraction=0.1, tokenize_tasks=1)
    told = pack(cfg.replace(split=probe_split.path), only_pulls, tmp / "pulls_split").manifest
    assert told is not None and told["split"]["sha"] == probe_split.sha and told["heldout_excluded"]["fraction"] == 0.2
    train, valid = _sides(tmp / "pulls_split")
    assert "pr:Acme/Calc#32" in valid and not any(d.startswith("pr:") and "#32" in d for d in train)
    # a pack without the file decides from its own inputs, and says so
    caplog.clear()
    alone = pack(cfg, only_pulls, tmp / "pulls_alone").manifest
    assert alone is not None and alone["split"]["file"] is None
    assert any("no split file" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "pr:Acme/Calc#32" in _sides(tmp / "pulls_alone")[0]


def test_case4_heldout_fix_commits_train_nowhere(run):
    from midtrain.formats.run_split import FIX_COMMIT

    split, shas = run["split"], run["shas"]
    commits = {d["id"]: d["metadata"]["commits"] for d in _docs(run["prep"]["commits"])}
    by_sha = {s: doc_id for doc_id, cs in commits.items() for s in cs}
    assert all(len(cs) == 1 for cs in commits.values())  # one commit a document (max_doc_bytes)
    # #64's merge commit by its sha, #81's commit by its task row's patch; #33 is no held-out task's
    assert split.fix_docs == {by_sha[shas[64]]: "acme/calc#64", by_sha[shas[81]]: "acme/calc#81"}
    train, valid = _sides(run["tmp"] / "shards")
    assert not set(split.fix_docs) & (train | valid)
    assert by_sha[shas[33]] in train | valid
    fixed = run["manifest"]["heldout_excluded"][FIX_COMMIT]
    assert fixed["documents"] == 2 and fixed["instances"] == ["acme/calc#64", "acme/calc#81"] and fixed["tokens"] > 0


def test_case4_a_commits_prep_given_the_split_leaves_the_fixes_out(run, tmp_path):
    split, shas = run["split"], run["shas"]
    out = _prep(
        "commits",
        run["tmp"] / "git" / "calc",
        tmp_path / "commits",
        "commits.max_doc_bytes=1024",
        f"commits.run_split={split.path}",
    )
    kept = {s for d in _docs(out) for s in d["metadata"]["commits"]}
    assert shas[33] in kept and not {shas[64], shas[81]} & kept
    stats = json.loads((out / "stats.json").read_text())
    assert len(kept) == 2 and stats["skips"]["source/skip/heldout_fix_commit"] == 2  # of 4 commits, counted


def test_case5_task_row_ids_name_the_task_wherever_the_input_lies(tmp_path):
    from midtrain.formats.instance_id import canonical_instance
    from midtrain.formats.trace_split import doc_instance, instance_of

    assert canonical_instance("https://api.github.com/repos/Acme/Calc/pulls/5") == "acme/calc#5"
    assert canonical_instance("https://api.github.com/repos/Acme/Calc/issues/5") == "acme/calc#5"
    here, moved = tmp_path / "here", tmp_path / "elsewhere" / "deeper"
    shutil.copytree(DATA / "pulls", here)
    shutil.copytree(DATA / "pulls", moved)
    again = _prep("pulls", moved, tmp_path / "prep_moved")
    first = _by_original(_prep("pulls", here, tmp_path / "prep_here"))
    assert _by_original(again) == first  # the same ids from another place
    rows = {k: v for k, v in first.items() if not k.startswith("pr:")}
    assert rows == {
        "acme__calc-60": "pr:acme/calc#60",
        "acme/calc#64": "pr:acme/calc#64",
        "https://github.com/acme/calc/pull/81": "pr:acme/calc#81",
        "https://api.github.com/repos/Acme/Calc/pulls/33": "pr:acme/calc#33",
    }
    for d in _docs(again):
        assert str(tmp_path) not in d["id"] and instance_of(d["id"]) == doc_instance(d) == d["metadata"]["instance_id"]


def test_case6_trace_sets_split_by_instance_whatever_their_repositories(run):
    """README's sentence (issue #54, case 6): a trace set is held out by task instance, never by repository:
    the held-out traces are exactly those of held-out instances, even in a run split by repository."""
    from midtrain.formats.trace_split import doc_instance

    split = run["split"]
    train, valid = _sides(run["tmp"] / "shards")
    for d in _docs(run["prep"]["traces"]):
        assert (d["id"] in valid) == split.heldout(doc_instance(d)), d["id"]


def test_the_probe_and_inspect_check_by_canonical_id(run, tmp_path, capsys):
    """The probe holds out the run split's instances (links too); a held-out task's attempt in another spelling
    and a fix commit, packed as if split already, are found by `midtrain inspect` and the check's function."""
    from midtrain.formats.run_split import training_leaks
    from midtrain.formats.trace_split import doc_instance, shard_instances
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack
    from midtrain.sft.data import prepare_data

    split = run["split"]
    stamp = prepare_data(probe_cfg(run["prep"]["traces"], f"split={split.path}"), tmp_path / "sft")
    traces = _docs(run["prep"]["traces"])
    assert set(stamp["valid_ids"]) == {d["id"] for d in traces if split.heldout(doc_instance(d))}
    assert stamp["heldout"]["run_split"] == split.path and stamp["heldout"]["in_probe_training"] == 0
    assert not training_leaks(split, stamp["train_shards"]) and shard_instances(stamp["valid_shards"])

    assert main(["inspect", str(run["tmp"] / "shards")]) == 0  # the pack's own split file, from its manifest
    assert "none of its" in capsys.readouterr().out
    fix = next(iter(split.fix_docs))
    leaks = [
        {"text": "attempt", "id": "trace:Acme__Calc-i30:another.traj", "metadata": {"source": "trace"}},
        {"text": "commit 000000000000\n", "id": fix, "metadata": {"source": "commit"}},
    ]
    leaky = write_documents(tmp_path / "leaky", leaks)
    (leaky / "heldout.json").write_text(
        json.dumps({"version": 2, "fraction": None, "by": "instance", "heldout_groups": []})
    )  # as if split already: the pack holds nothing out
    cfg = PackConfig(seq_length=256, valid_fraction=0.0, heldout_fraction=0.0, tokenize_tasks=1)
    pack(cfg, [leaky], tmp_path / "leaky_shards")
    assert training_leaks(split, tmp_path / "leaky_shards") == {
        "acme/calc#30": ["trace:Acme__Calc-i30:another.traj"],
        split.fix_docs[fix]: [fix],
    }
    assert main(["inspect", str(tmp_path / "leaky_shards"), "--split-file", str(split.path)]) == 1
    out = capsys.readouterr().out
    assert "2 held-out instances in the training split" in out and "acme/calc#30" in out


def test_case7_a_refused_sft_prints_one_line(tmp_path, capsys):
    from sft_helpers import tiny_checkpoint

    traces = _prep("traces", DATA / "traces", tmp_path / "traces")
    (traces / "heldout.json").write_text(
        json.dumps({"version": 2, "fraction": 0.1, "by": "instance", "heldout_groups": [], "rule": "sha256"})
    )
    start = tiny_checkpoint(tmp_path / "start")
    argv = ["sft", "sft_probe_demo", "--from", str(start), "--output", str(tmp_path / "probe")]
    capsys.readouterr()  # the prep's and the checkpoint's logs
    assert main([*argv, f"traces=[{traces}]", "valid_fraction=0.3", "export_hf=false"]) == 1
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith("midtrain sft: ") and "heldout.json" in err and "0.3" in err


def test_the_demo_decides_one_split_for_its_pack_and_its_probe(run, tmp_path):
    """The demo's pack stage writes WORKDIR/split.json from every prep output before packing them, and its
    protocol's probe is given the same file."""
    from midtrain.demo.stages import demo_protocol, pack_stage
    from midtrain.formats.run_split import read

    work = tmp_path / "demo"
    for name, d in run["prep"].items():
        shutil.copytree(d, work / "prep" / name, ignore=shutil.ignore_patterns("tokenized"))
    manifest = json.loads((Path(pack_stage(work)) / "manifest.json").read_text())
    split = read(work.absolute() / "split.json")
    assert manifest["split"]["file"] == split.path and manifest["split"]["sha"] == split.sha
    assert split.record["inputs"] == sorted(str(work / "prep" / n) for n in run["prep"])
    assert f"split={split.path}" in demo_protocol(work).sft_overrides
