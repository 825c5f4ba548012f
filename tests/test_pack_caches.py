"""The tokenize cache of an input (PREP/tokenized/, or --cache-dir) after interruptions: a rerun with another
tokenize_tasks loses and duplicates nothing, two packs of one input share it under a lock, and the locks
themselves have one holder at a time."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pack_helpers import commit_doc, pack_manifest, write_prep

from midtrain.pack.pack_step import PackConfig
from midtrain.pack.pipeline import pack

REPO = Path(__file__).resolve().parents[1]
S = 256


def _docs():
    rng = random.Random(11)
    return [commit_doc(i, rng) for i in range(48)]


def _shards(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.glob("*/*")) if p.suffix in (".bin", ".idx")}


def _cfg(tasks: int) -> PackConfig:
    return PackConfig(seq_length=S, valid_fraction=0.0, tasks=2, tokenize_tasks=tasks)


def _interrupted_after(prep: Path, tasks: int, finished: int) -> None:
    """PREP's tokenize cache as a pack killed after FINISHED of its TASKS tokenize tasks leaves it: the outputs
    and datatrove completion markers of those tasks, no stamp. Made from a whole run by removing what the
    unfinished tasks and the later stages write (a task's .json and its marker are written last), so the
    state is the same on any machine, fast or loaded."""
    pack(_cfg(tasks), [prep], prep.parent / "whole")
    (cache,) = (prep / "tokenized").iterdir()
    (cache / "complete.json").unlink()
    for rank in range(finished, tasks):
        for f in cache.glob(f"{rank:05d}.*"):
            f.unlink()
        for marker in cache.glob(f"logs/*/completions/{rank:05d}"):
            marker.unlink()
    for marker in cache.glob("logs/stamp-*/completions/*"):
        marker.unlink()


@pytest.mark.parametrize(("before", "finished", "after"), [(8, 4, 4), (4, 2, 8)])
def test_another_tokenize_tasks_after_an_interrupted_tokenize_loses_and_duplicates_nothing(
    tmp_path, before, finished, after
):
    reference = write_prep(tmp_path / "ref" / "commits", _docs(), files=8)
    ref = pack_manifest(_cfg(after), [reference], tmp_path / "ref" / "out")
    prep = write_prep(tmp_path / "run" / "commits", _docs(), files=8)
    _interrupted_after(prep, before, finished)
    got = pack_manifest(_cfg(after), [prep], tmp_path / "run" / "out")
    assert got["input_documents"] == ref["input_documents"] == 48  # before: 24 (lost) or 72 (twice)
    assert got["input_tokens"] == ref["input_tokens"]
    assert _shards(tmp_path / "run" / "out") == _shards(tmp_path / "ref" / "out")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_read_only_prep_packs_with_its_cache_elsewhere(tmp_path):
    """--cache-dir: nothing is written into the prep directory (a read-only or shared one); the manifest names
    the caches used."""
    from midtrain.cli import main

    prep = write_prep(tmp_path / "commits", _docs(), files=2)
    before = _tree(prep)
    argv = [
        "pack",
        "--input",
        str(prep),
        "--output",
        str(tmp_path / "out"),
        "--seq-length",
        str(S),
        "valid_fraction=0.0",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    assert main(argv) == 0
    assert _tree(prep) == before and not (prep / "tokenized").exists()
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["input_documents"] == 48
    assert all(d.startswith(str(tmp_path / "cache")) for d in manifest["tokenized"])


@pytest.mark.slow
def test_a_full_disk_under_the_cache_names_the_cache(tmp_path):
    """A write past the file-size limit (as a full disk) while tokenizing names the cache's directory, the disk
    to free, not the output's."""
    import resource

    prep = write_prep(tmp_path / "commits", _docs() * 4, files=1)

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, 30_000))  # below the tokenized tokens of 192 documents

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "midtrain.cli",
            "pack",
            "--input",
            str(prep),
            "--output",
            str(tmp_path / "out"),
            "--seq-length",
            str(S),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("midtrain pack: I/O error: File too large: " + str(prep / "tokenized")), last


def _contend(out: str, start, results) -> None:
    """One of several processes taking OUTPUT's lock at the same moment: while it holds it, it must be alone."""
    from midtrain.formats.outputs import OutputInUse
    from midtrain.runner import output_lock

    start.wait()
    try:
        with output_lock(Path(out), "contender"):
            try:  # the one holder: this create fails if another process holds the lock too
                fd = os.open(Path(out) / "held", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                results.put("overlap")
                return
            os.close(fd)
            time.sleep(0.01)
            os.unlink(Path(out) / "held")
            results.put("held")
    except OutputInUse:
        results.put("refused")


def test_the_output_lock_has_one_holder_among_processes_taking_it_at_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    outcomes: list[str] = []
    for trial in range(10):
        out = tmp_path / f"out{trial}"
        out.mkdir()
        start, results = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_contend, args=(str(out), start, results)) for _ in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        outcomes += [results.get(timeout=10) for _ in procs]
        assert not (out / ".midtrain.lock").exists() and not list(out.iterdir())  # nothing left behind
    assert "overlap" not in outcomes and outcomes.count("held") >= 10, outcomes


@pytest.mark.slow
def test_two_packs_of_one_input_share_its_cache_under_a_lock(tmp_path):
    """The first pack is stopped while it holds PREP/tokenized/'s lock; the second waits for it (its log says
    so), and once the first goes on both finish with the same shards, the input tokenized once."""
    prep = write_prep(tmp_path / "commits", _docs(), files=4)
    lock = prep / "tokenized" / ".midtrain.lock"
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def start(name: str, log: Path) -> subprocess.Popen:
        argv = [
            sys.executable,
            "-m",
            "midtrain.cli",
            "pack",
            "--input",
            str(prep),
            "--output",
            str(tmp_path / name),
            "--seq-length",
            str(S),
            "valid_fraction=0.0",
        ]
        return subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True
        )

    def wait_for(ready, proc: subprocess.Popen) -> None:
        deadline = time.time() + 300
        while proc.poll() is None and time.time() < deadline and not ready():
            time.sleep(0.02)
        assert ready(), f"pack exited {proc.poll()} before the point the test waits for"

    first = start("a", tmp_path / "a.log")
    second = None
    try:
        wait_for(lambda: lock.exists() and "tokenize" in lock.read_text(), first)
        os.killpg(first.pid, signal.SIGSTOP)
        second = start("b", tmp_path / "b.log")
        wait_for(lambda: "waiting: " in (tmp_path / "b.log").read_text(), second)
        os.killpg(first.pid, signal.SIGCONT)
        assert first.wait(300) == 0 and second.wait(300) == 0, (tmp_path / "b.log").read_text()[-3000:]
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert _shards(tmp_path / "a") == _shards(tmp_path / "b") and _shards(tmp_path / "a")
    assert "by another pack" in (tmp_path / "b.log").read_text()
    (cache,) = (p for p in (prep / "tokenized").iterdir() if p.is_dir())
    assert len(list(cache.glob("logs/*-*t/completions/*"))) == 4  # 4 tokenize tasks, run once
    assert not lock.exists()
