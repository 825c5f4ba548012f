"""The real-model experiment's corpus is pinned: this repository at a recorded commit, read from git. Editing
the checkout's files, adding untracked ones, committing on its branch or on another one changes nothing the
readers read of the pinned copy, and its digest says so; the live checkout's own digest moves."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sources_fixtures import commit, git, make_repo

from midtrain.demo.corpus import corpus_digest, pinned_checkout
from midtrain.demo.real_model import _stat
from recipes.smollm2 import CORPUS_COMMIT


def _head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def test_the_corpus_digest_does_not_move_with_the_working_tree_or_later_commits(tmp_path):
    src = make_repo(tmp_path / "src", {"a.py": "x = 1\n", "README.md": "hello\n"})
    pinned = _head(src)
    before = corpus_digest(pinned_checkout(src, pinned, tmp_path / "p1"))
    live = corpus_digest(src)

    (src / "a.py").write_text("x = 2  # an uncommitted edit\n")
    (src / "untracked.py").write_text("secret = 1\n")
    git(src, "checkout", "-q", "-b", "other")
    commit(src, {"b.py": "y = 1\n"}, "work on another branch")
    git(src, "checkout", "-q", "main")
    commit(src, {"c.py": "z = 1\n"}, "a later commit on main")
    (src / "a.py").write_text("x = 3\n")

    copy = pinned_checkout(src, pinned[:10], tmp_path / "p2")
    assert corpus_digest(copy) == before and before["commit"] == pinned and before["commits"] == "1"
    assert (copy / "a.py").read_text() == "x = 1\n" and not (copy / "untracked.py").exists()
    assert not (copy / "c.py").exists() and not (copy / "b.py").exists()
    assert git(copy, "branch", "--format=%(refname:short)").split() == ["pinned"]
    assert corpus_digest(src)["digest"] != live["digest"]  # what the old experiment read: the live checkout
    assert corpus_digest(copy, {"click": "8.5.1"})["digest"] != before["digest"]  # package versions count


def test_a_commit_outside_the_history_and_a_stale_copy_are_refused(tmp_path):
    src = make_repo(tmp_path / "src", {"a.py": "x = 1\n"})
    with pytest.raises(ValueError, match="corpus commit 0123456789abcdef: not in the history"):
        pinned_checkout(src, "0123456789abcdef", tmp_path / "p")
    pinned_checkout(src, _head(src), tmp_path / "p")
    commit(src, {"b.py": "y = 1\n"}, "later")
    with pytest.raises(ValueError, match="not the recorded"):
        pinned_checkout(src, _head(src), tmp_path / "p")


def test_the_recorded_commit_is_in_this_repository_and_pins_its_traces(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{CORPUS_COMMIT}^{{commit}}"]).returncode:
        pytest.skip(f"a shallow clone without the corpus commit {CORPUS_COMMIT[:12]}")
    copy = pinned_checkout(repo, CORPUS_COMMIT, tmp_path / "corpus")
    assert _head(copy) == CORPUS_COMMIT
    assert (copy / "data_prep" / "samples" / "real_traces" / "django__django-11163.traj.json").is_file()


def test_drop_counters_are_summed_over_steps():
    stats = {"drops": {"curate/n-grams/dropped_heldout_ngram": 3, "curate/x/dropped_heldout_ngram": 1, "a/b": 9}}
    assert _stat(stats, "dropped_heldout_ngram") == 4 and _stat({}, "dropped_heldout_ngram") == 0


@pytest.mark.slow
def test_at_the_recorded_commit_the_commit_quoting_the_heldout_trajectory_is_dropped(tmp_path):
    """The leak the issue found: the commit that vendored the real traces carries the held-out file in its diff."""
    import json

    from midtrain.demo.real_model import COMMIT_PREP, REAL_TRACES
    from midtrain.sources.prep import prep

    repo = Path(__file__).resolve().parents[1]
    if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{CORPUS_COMMIT}^{{commit}}"]).returncode:
        pytest.skip(f"a shallow clone without the corpus commit {CORPUS_COMMIT[:12]}")
    copy = pinned_checkout(repo, CORPUS_COMMIT, tmp_path / "corpus")
    messages = json.loads((copy / REAL_TRACES / "django__django-11163.traj.json").read_text())["messages"]
    text = "\n".join(m["content"] for m in messages if m["role"] == "assistant")
    held = tmp_path / "heldout.jsonl"
    held.write_text(json.dumps({"id": "django__django-11163", "text": text}) + "\n")
    # by content alone (the samples' paths kept): the n-gram step drops the commit that quotes it
    by_content = [o for o in COMMIT_PREP if "extra_skip_dirs" not in o]
    prep("commits", [str(copy)], tmp_path / "commits", [*by_content, f"decontam.heldout=[{held}]"])
    stats = json.loads((tmp_path / "commits" / "stats.json").read_text())
    assert _stat(stats, "dropped_heldout_ngram") >= 1
    # as the experiment preps it (the samples' files removed first): no document left holds a held-out 13-gram
    from midtrain.curate.decontam import NgramIndex
    from midtrain.formats.trace_split import iter_documents

    prep("commits", [str(copy)], tmp_path / "exp", [*COMMIT_PREP, f"decontam.heldout=[{held}]"])
    index = NgramIndex(13)
    index.add("held", text)
    docs = list(iter_documents(tmp_path / "exp"))
    assert docs and not any(index.found(d["text"]) for d in docs)


@pytest.mark.slow
def test_the_experiments_prep_reads_the_pinned_corpus_and_decontaminates_by_content(tmp_path, monkeypatch):
    """`midtrain demo --model smollm2 --only prep` in small (one package; a ChatML tokenizer standing in for the
    converted model's): the corpus is the recorded commit's, its digest recorded; the held-out trajectories'
    text is written first and the commits prep drops what quotes it, counted."""
    import json
    import shutil

    from midtrain.demo import real_model
    from midtrain.formats.tokenizer import default_tokenizer_path

    repo = Path(__file__).resolve().parents[1]
    if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{CORPUS_COMMIT}^{{commit}}"]).returncode:
        pytest.skip(f"a shallow clone without the corpus commit {CORPUS_COMMIT[:12]}")
    shutil.copytree(Path(default_tokenizer_path()).parent, tmp_path / real_model.MODEL / "hf_source")
    monkeypatch.setattr(real_model, "PACKAGES", (("attrs", "attr"),))
    out = real_model.prep_stage(tmp_path)
    assert out["corpus"]["commit"] == CORPUS_COMMIT
    assert json.loads((tmp_path / "prep" / "corpus.json").read_text())["digest"] == out["corpus"]["digest"]
    assert out["prep"]["heldout_texts"] == 5
    rows = [json.loads(x) for x in (tmp_path / "prep" / real_model.HELDOUT_TEXTS).read_text().splitlines()]
    assert any("11163" in r["id"] for r in rows) and all(len(r["text"]) > 1000 for r in rows)
    assert "dropped_heldout_ngram" in out["prep"]["commits"]  # counted (0 here: the samples' files went first)
    assert out["prep"]["traces"]["dropped_heldout_ngram"] == 0  # traces are split by instance, not dropped
    # the agent leg's tasks (the minicalc sample) and the vendored traces are in no repos or commits document
    from midtrain.curate.leak_scan import heldout_index
    from midtrain.formats.trace_split import iter_documents

    index = heldout_index(rows)
    for source in ("repos", "commits"):
        texts = [d["text"] for d in iter_documents(tmp_path / "prep" / source)]
        assert texts and not any(
            "<|file_sep|>data_prep/samples/" in t or "diff --git a/data_prep/samples/" in t for t in texts
        ), source
        assert not any(index.found(t) for t in texts), source  # no held-out trajectory's 13-gram either


def test_a_prep_dir_from_another_corpus_is_refused(tmp_path):
    import json

    from midtrain.demo.real_model import check_prep_corpus

    check_prep_corpus(tmp_path, CORPUS_COMMIT)  # nothing there yet
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "stats.json").write_text("{}")
    with pytest.raises(ValueError, match=r"\['commits'\] prepped without a pinned corpus"):
        check_prep_corpus(tmp_path, CORPUS_COMMIT)
    (tmp_path / "corpus.json").write_text(json.dumps({"commit": "0" * 40}))
    with pytest.raises(ValueError, match="prepped from commit 000000000000, not the recorded"):
        check_prep_corpus(tmp_path, CORPUS_COMMIT)
    (tmp_path / "corpus.json").write_text(json.dumps({"commit": CORPUS_COMMIT}))
    check_prep_corpus(tmp_path, CORPUS_COMMIT)
