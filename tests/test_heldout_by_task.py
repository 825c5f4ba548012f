"""The probe's held-out set is held out by task everywhere (issue #42): 16 instances of acme/calc written by real
producers' formats (tests/data/heldout: the installed mini-swe-agent's own trajectories, SWE-agent .traj,
OpenAI-messages rows, SWE-bench task rows, GitHub pull requests), spelled several ways across two trace sets and
the pulls inputs, go through the real prep, midtraining pack and probe data step; no held-out instance reaches
a training split, and the checks count instances."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sft_helpers import probe_cfg, write_documents

from midtrain.cli import main

DATA = Path(__file__).parent / "data" / "heldout"
NO_CURATION = [f"{s}.enabled=false" for s in ("license", "decontam", "quality", "redact", "dedup")]


def _prep(source: str, inp: Path, out: Path, *overrides: str) -> Path:
    assert main(["prep", source, *NO_CURATION, *overrides, "--input", str(inp), "--output", str(out)]) == 0
    return out


def _docs(prep_dir: Path) -> list[dict]:
    from midtrain.formats.trace_split import iter_documents

    return list(iter_documents(prep_dir))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack

    tmp = tmp_path_factory.mktemp("heldout")
    sets = [_prep("traces", DATA / s, tmp / "prep" / s) for s in ("set_a", "set_b")]
    pulls = _prep("pulls", DATA / "pulls", tmp / "prep" / "pulls")
    # valid_fraction=0: only held-out instances go to validation, so every other document must train
    manifest = pack(
        PackConfig(seq_length=1024, valid_fraction=0.0, tokenize_tasks=1), [*sets, pulls], tmp / "shards"
    ).manifest
    return {"tmp": tmp, "sets": sets, "pulls": pulls, "manifest": manifest, "shards": tmp / "shards"}


def _heldout() -> set[str]:
    from midtrain.formats.trace_split import DEFAULT_FRACTION, instance_heldout

    return {f"acme/calc#{n}" for n in range(1, 22) if instance_heldout(f"acme/calc#{n}", DEFAULT_FRACTION)}


def test_every_spelling_and_source_names_one_instance(world):
    from midtrain.formats.trace_split import doc_instance, instance_of

    docs = [d for p in [*world["sets"], world["pulls"]] for d in _docs(p)]
    assert len(docs) == 16 + 19 + 16 + 4  # set A, set B (16 rows + 3 retries), task rows, pull requests
    by_instance: dict[str, set[str]] = {}
    for d in docs:
        inst = doc_instance(d)
        assert d["metadata"]["instance_id"] == inst == instance_of(d["id"])  # metadata and id agree
        by_instance.setdefault(inst, set()).add(str(d["metadata"].get("instance_id_original") or d["id"]))
    assert set(by_instance) == {f"acme/calc#{n}" for n in (*range(1, 17), 20, 21)}  # 16 tasks + 2 other PRs
    # instance 5: SWE-agent's file name, a pull URL path (row and retry), SWE-bench's id, a PR (no instance id)
    assert by_instance["acme/calc#5"] == {"Acme__Calc-5", "acme/calc/pull/5", "acme__calc-5", "pr:Acme/Calc#5"}


def test_no_heldout_instance_reaches_a_midtraining_training_shard(world):
    from midtrain.formats.trace_split import doc_instance, read_split, shard_doc_ids, shard_instances

    held = _heldout()
    assert len(held) >= 2  # the fixture holds several held-out tasks at the default fraction
    train, valid = shard_instances(world["shards"], "train"), shard_instances(world["shards"], "valid")
    assert not set(train) & held and set(valid) == held
    # every document of a held-out task, in any set, spelling or source, is in validation; the others all train
    docs = [d for p in [*world["sets"], world["pulls"]] for d in _docs(p)]
    held_ids = {d["id"] for d in docs if doc_instance(d) in held}
    assert held_ids == shard_doc_ids(world["shards"], "valid")
    assert shard_doc_ids(world["shards"], "train") == {d["id"] for d in docs} - held_ids
    ex = world["manifest"]["heldout_excluded"]
    assert (
        ex["reason"] == "dropped_heldout_instance"
        and ex["instances"] == len(held)
        and ex["instance_ids"] == sorted(held)
    )
    assert ex["documents"] == len(held_ids) == sum(ex["documents_by_source"].values())
    assert ex["documents_by_source"]["pr"] == sum(1 for d in docs if d["id"] in held_ids and d["id"].startswith("pr:"))
    assert ex["documents_by_source"]["pr"] >= len(held)  # task rows and pull requests of held-out tasks
    # the two trace sets recorded the same rule: each holds out exactly the held-out instances it has
    for s in world["sets"]:
        split = read_split(s)
        assert split is not None
        assert split["rule"].startswith("sha256") and split["fraction"] == 0.1
        assert set(split["heldout_groups"]) == held & {doc_instance(d) for d in _docs(s)}


def test_the_probe_holds_out_the_same_instances_across_both_sets(world):
    from midtrain.formats.trace_split import doc_instance, shard_instances
    from midtrain.sft.data import prepare_data

    cfg = probe_cfg(world["sets"][0]).replace(traces=[str(s) for s in world["sets"]])
    stamp = prepare_data(cfg, world["tmp"] / "sft_data")
    held = _heldout() & {f"acme/calc#{n}" for n in range(1, 17)}
    assert not set(shard_instances(stamp["train_shards"], "train")) & held
    assert set(shard_instances(stamp["valid_shards"], "train")) == held  # the probe scores them, from both sets
    h = stamp["heldout"]
    assert h["instances"] == len(held) and h["instance_ids"] == sorted(held) and h["in_probe_training"] == 0
    trace_docs = [d for s in world["sets"] for d in _docs(s)]
    assert stamp["valid_docs"] == sum(doc_instance(d) in held for d in trace_docs) > len(held)  # attempts, not tasks
    assert stamp["train_docs"] == len(trace_docs) - stamp["valid_docs"]


def test_the_instance_check_counts_a_leaked_attempt_in_another_spelling(world, tmp_path):
    """The training-shard check is by instance: a held-out task's trace under a document id the probe never saw
    (another set, another spelling) is found, where comparing document ids found nothing."""
    from midtrain.formats.trace_split import DEFAULT_FRACTION, instance_heldout, shard_doc_ids, shard_instances
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack

    held = sorted(_heldout())[0]
    leak = {
        "text": "attempt",
        "id": f"trace:{held.replace('acme/calc#', 'Acme__Calc-')}:elsewhere.traj",
        "metadata": {"source": "trace"},
    }
    leaky = write_documents(tmp_path / "leaky", [leak])
    (leaky / "heldout.json").write_text(
        json.dumps({"version": 2, "fraction": None, "by": "instance", "heldout_groups": []})
    )  # as if split already: nothing held out
    pack(
        PackConfig(seq_length=256, valid_fraction=0.0, heldout_fraction=0.0, tokenize_tasks=1),
        [leaky],
        tmp_path / "shards",
    )
    assert shard_doc_ids(tmp_path / "shards", "train") == {leak["id"]}  # a document id no held-out list holds
    assert instance_heldout(held, DEFAULT_FRACTION) and held in shard_instances(tmp_path / "shards", "train")


def test_a_probe_rendering_with_another_template_is_refused_naming_both(world, tmp_path):
    from midtrain.formats.tokenizer import load_tokenizer
    from midtrain.sft.data import TemplateMismatch, prepare_data

    tok = load_tokenizer()
    tok.chat_template = tok.chat_template + "{#- another model's template #}"
    tok.save_pretrained(str(tmp_path / "tok"))
    other = probe_cfg(world["sets"][0], f"tokenizer={tmp_path / 'tok'}")
    with pytest.raises(TemplateMismatch, match=r"tokenizer \(default\) .*probe's tokenizer .*tok has template"):
        prepare_data(other, tmp_path / "refused")
    # prepared with the messages kept, the probe renders them with its own tokenizer's template
    kept = _prep("traces", DATA / "set_a", tmp_path / "kept", "traces.keep_messages=true")
    stamp = prepare_data(probe_cfg(kept, f"tokenizer={tmp_path / 'tok'}"), tmp_path / "rendered")
    assert stamp["train_docs"] + stamp["valid_docs"] == 16 and not stamp["dropped"]


def test_repositories_and_commits_validate_by_repository(tmp_path):
    """The proxy's held-out repository loss is on repositories no training document holds, the same repositories
    in every source; a run of one repository falls back to documents (the demo: this repository alone), and the
    manifest says which."""
    from midtrain.formats.trace_split import shard_doc_ids
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack

    def doc(kind: str, repo: str, i: int) -> dict:
        text = (
            f"<|repo_name|>{repo}\n<|file_sep|>m{i}.py\ndef f{i}(x):\n    return x + {i}\n"
            if kind == "repo"
            else f"commit {i:012x}\n\nfix {i}\n\ndiff --git a/m.py b/m.py\n+x = {i}\n"
        )
        return {"text": text, "id": f"{kind}:{repo}:{i}", "metadata": {"source": kind, "repo": repo}}

    repos = write_documents(tmp_path / "repos", [doc("repo", f"Org/R{r}", i) for r in range(8) for i in range(2)])
    commits = write_documents(tmp_path / "commits", [doc("commit", f"org/r{r}", i) for r in range(7) for i in range(2)])
    manifest = pack(
        PackConfig(seq_length=256, valid_fraction=0.2, tokenize_tasks=1), [repos, commits], tmp_path / "shards"
    ).manifest
    assert manifest is not None
    train, valid = (shard_doc_ids(tmp_path / "shards", s) for s in ("train", "valid"))
    side: dict[str, set[bool]] = {}
    for d in train | valid:
        side.setdefault(d.split(":")[1].lower(), set()).add(d in valid)
    assert all(len(s) == 1 for s in side.values()) and len(side) == 8  # one side only, in repos and commits alike
    assert {True, False} == {next(iter(s)) for s in side.values()}  # some repositories validate, some train
    held = {r for r, s in side.items() if s == {True}}
    assert set(manifest["split"]["validation_repositories"]) == held
    by = {"by": "repository", "repositories": 8, "validation_repositories": len(held)}
    assert manifest["valid_split"]["repo"] == by

    one = write_documents(tmp_path / "one", [doc("commit", "one/repo", i) for i in range(10)])
    manifest = pack(
        PackConfig(seq_length=256, valid_fraction=0.2, tokenize_tasks=1), [one], tmp_path / "one_shards"
    ).manifest
    assert manifest is not None
    assert manifest["valid_split"]["commit"] == {
        "by": "document",
        "repositories": 1,
        "why": "no validation repositories in the run",
    }
    train, valid = (shard_doc_ids(tmp_path / "one_shards", s) for s in ("train", "valid"))
    assert train and valid
