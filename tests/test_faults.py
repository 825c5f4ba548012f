"""Fault tolerance of the whole pipeline: SIGKILL at random points then rerun, full disks, unwritable outputs.

A rerun after a kill must give byte-identical outputs (prep, pack) and identical per-step losses (train);
a write failure must stop with a message naming the problem and leave nothing a later stage would read.
"""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "data_prep" / "samples"
MIDTRAIN = [sys.executable, "-m", "midtrain.cli"]


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(MIDTRAIN + args, capture_output=True, text=True, cwd=REPO, **kw)


def _completions(out: Path) -> int:
    """Finished tasks of a prep or pack run so far: datatrove's completion marker per task and stage."""
    return len(list(out.glob("logs/*/completions/*")))


def _kill_point(reference: Path, seed: int) -> int:
    """A random point of a run, as a count of finished tasks: at least one, and in the first half of the
    reference run's total (at least two short of it). The poll that sees it lags the run, which goes on finishing empty tasks every
    few milliseconds: half a run's tasks still to go keeps it running until the kill on a fast machine too."""
    total = _completions(reference)
    assert total >= 3, f"{reference}: {total} task completions, too few to kill a run between them"
    return random.Random(seed).randint(1, max(1, total // 2))


def _kill_when(args: list[str], ready, timeout: float = 600) -> None:
    """Start a midtrain command and SIGKILL its process group as soon as ``ready()`` holds."""
    proc = subprocess.Popen(
        MIDTRAIN + args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline and not ready():
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before the kill point: the test would prove nothing"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tree_bytes(root: Path, patterns: tuple[str, ...]) -> dict[str, bytes]:
    out = {}
    for pattern in patterns:
        for p in sorted(root.rglob(pattern)):
            if p.is_file():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


PREP_PULLS = ["prep", "pulls", "--input", str(SAMPLES / "pulls")]
PREP_ARGS = PREP_PULLS + ["--tasks", "3"]


@pytest.fixture(scope="module")
def prep_reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prep_ref") / "pulls"
    r = _run(PREP_ARGS + ["--output", str(out)])
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_prep_killed_at_random_point_then_rerun_is_byte_identical(tmp_path, prep_reference, seed):
    out = tmp_path / "pulls"
    kill_at = _kill_point(prep_reference, seed)  # SIGKILL as soon as that many stage tasks have finished
    _kill_when(PREP_ARGS + ["--output", str(out)], lambda: _completions(out) >= kill_at)
    r = _run(PREP_ARGS + ["--output", str(out)])
    assert r.returncode == 0, r.stderr[-3000:]
    ref = _tree_bytes(prep_reference, ("documents/*",))
    got = _tree_bytes(out, ("documents/*",))
    assert ref and got.keys() == ref.keys()
    for name in ref:
        assert got[name] == ref[name], f"{name} differs after kill + rerun"
    stats = json.loads((out / "stats.json").read_text())
    ref_stats = json.loads((prep_reference / "stats.json").read_text())
    assert stats["documents_out"] == ref_stats["documents_out"] and stats["drops"] == ref_stats["drops"]


@pytest.fixture(scope="module")
def pack_inputs(prep_reference) -> list[str]:
    return [str(prep_reference)]


def _pack_args(inputs: list[str], out: Path) -> list[str]:
    return ["pack", "--input", *inputs, "--output", str(out), "--seq-length", "1024", "tasks=2"]


@pytest.mark.slow
def test_pack_killed_at_random_point_then_rerun_is_byte_identical(tmp_path, pack_inputs):
    ref = tmp_path / "ref"
    r = _run(_pack_args(pack_inputs, ref))
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "killed"
    kill_at = _kill_point(ref, 7)  # SIGKILL as soon as that many pack tasks have finished
    _kill_when(_pack_args(pack_inputs, out), lambda: _completions(out) >= kill_at)
    r = _run(_pack_args(pack_inputs, out))
    assert r.returncode == 0, r.stderr[-3000:]
    ref_files = _tree_bytes(ref, ("*.bin", "*.idx"))
    got_files = _tree_bytes(out, ("*.bin", "*.idx"))
    assert ref_files and got_files.keys() == ref_files.keys()
    for name in ref_files:
        assert got_files[name] == ref_files[name], f"{name} differs after kill + rerun"
    ref_manifest = json.loads((ref / "manifest.json").read_text())
    got_manifest = json.loads((out / "manifest.json").read_text())
    for key in ("seq_length", "sequences", "tokens", "padding_tokens", "sources"):
        assert got_manifest.get(key) == ref_manifest.get(key), key


def _limit_file_size(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
def test_pack_on_a_full_disk_fails_clearly_and_leaves_no_readable_shards(tmp_path, pack_inputs):
    out = tmp_path / "full"
    proc = subprocess.run(
        MIDTRAIN + _pack_args(pack_inputs, out),
        capture_output=True,
        text=True,
        cwd=REPO,
        preexec_fn=_limit_file_size(2048),
    )  # smaller than one packed sequence
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("midtrain pack: I/O error: File too large") and "disk full" in last, last
    assert str(out) in last, last  # where: the output whose disk is full
    # The manifest is written last: without it no later stage (reader, trainer, inspect) accepts the dir.
    assert not (out / "manifest.json").exists()
    from midtrain.formats.shard_reader import PackedDataset

    with pytest.raises(Exception, match="manifest"):
        PackedDataset(out)


def test_prep_on_a_full_disk_names_the_output(tmp_path):
    out = tmp_path / "full"
    proc = subprocess.run(
        MIDTRAIN + PREP_ARGS + ["--output", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        preexec_fn=_limit_file_size(2048),
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("midtrain prep: I/O error: File too large") and str(out) in last, last
    assert not (out / "stats.json").exists()  # no completion record: `midtrain pack` refuses the directory


def test_prep_into_an_unwritable_output_fails_with_a_message(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the output directory should be")
    r = _run(PREP_PULLS + ["--output", str(blocker / "out")])
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "not_a_dir" in last and "Traceback" not in r.stderr, r.stderr[-2000:]


def _losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows}


@pytest.mark.slow
def test_train_killed_at_random_point_then_rerun_gives_identical_losses(tmp_path):
    from train_helpers import tiny_config, write_shards

    from midtrain.train import distributed
    from midtrain.train.trainer import train

    shards = write_shards(tmp_path / "shards", sequences=24, seq_length=64)
    kill_at = random.Random(3).randint(4, 12)  # a step between checkpoints (every 3 steps)

    def config(name: str):
        return tiny_config(
            **{
                "data.path": str(shards),
                "run_dir": str(tmp_path / name),
                "optim.train_steps": 16,
                "checkpoint.save_interval": 3,
                "model.num_layers": 3,
            }
        )

    # the uninterrupted run in this process (one Python start-up fewer; one thread, as the CLI runs below)
    assert train(config("straight"))["exit_code"] == 0
    distributed.destroy()
    cfg_path = tmp_path / "killed.yaml"
    config("killed").save_yaml(cfg_path)
    metrics = tmp_path / "killed" / "metrics.jsonl"
    # SIGKILL: no chance to checkpoint on the way out (the lambda is polled before the loop moves on)
    _kill_when(["train", str(cfg_path)], lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= kill_at)
    r = _run(["train", str(cfg_path)], env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming at step" in r.stderr
    straight = _losses(tmp_path / "straight")
    assert sorted(straight) == list(range(1, 17))
    assert _losses(tmp_path / "killed") == straight  # bitwise on CPU, every step


@pytest.mark.slow
def test_job_wide_sigterm_checkpoints_and_exits_75(tmp_path):
    """Slurm preemption signals every process of the step, megatron's checkpoint helper included."""
    from train_helpers import tiny_config, write_shards

    from midtrain.train.checkpoint import latest_checkpoint

    shards = write_shards(tmp_path / "shards", sequences=24, seq_length=64)
    run_dir = tmp_path / "run"
    cfg = tiny_config(
        **{
            "data.path": str(shards),
            "run_dir": str(run_dir),
            "optim.train_steps": 400,
            "checkpoint.save_interval": 2,
            "model.num_layers": 3,
        }
    )
    cfg_path = tmp_path / "cfg.yaml"
    cfg.save_yaml(cfg_path)
    proc = subprocess.Popen(
        MIDTRAIN + ["train", str(cfg_path)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 600  # a loaded machine may take minutes to import and reach step 5
    while proc.poll() is None and time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:  # past the first checkpoint save
            break
        time.sleep(0.05)
    assert proc.poll() is None and len(metrics.read_text().splitlines()) >= 5, (
        "training ended or never reached step 5 before the signal"
    )
    os.killpg(proc.pid, signal.SIGTERM)  # the whole process group, as a job-wide signal does
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 75, err[-3000:]
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and int(ckpt.name.split("_")[1]) >= 5


def _user_prep(d: Path, inputs: list[str]) -> Path:
    """A finished `midtrain prep` output of the user's (its settings record and documents)."""
    (d / "documents").mkdir(parents=True)
    (d / "documents" / "00000.jsonl.gz").write_bytes(b"")
    (d / "prep.json").write_text(json.dumps({"source": d.name, "inputs": inputs, "tasks": 1}))
    (d / "stats.json").write_text(json.dumps({"source": d.name, "complete": True}))
    return d


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("shards", ["unfinished_pack", "missing"])
def test_train_on_a_demo_recipe_never_builds_demo_data_over_or_beside_the_users(tmp_path, capsys, shards):
    from midtrain.cli import main

    out = tmp_path / "out"  # the README's layout: out/prep/*, out/shards
    _user_prep(out / "prep" / "repos", ["/home/me/src/proj"])
    if shards == "unfinished_pack":  # a pack that died before writing manifest.json
        (out / "shards" / "logs" / "0123456789abcdef").mkdir(parents=True)
        (out / "shards" / "train").mkdir()
        (out / "shards" / "train" / "00000.bin").write_bytes(b"\0" * 64)
    before = _listing(out)
    capsys.readouterr()
    assert main(["train", "demo_tiny", f"data.path={out / 'shards'}"]) == 2
    err = capsys.readouterr().err
    assert str(out / ("shards" if shards == "unfinished_pack" else "prep/repos")) in err, err
    assert _listing(out) == before  # no demo prep, no repack, nothing removed


def test_demo_data_is_built_where_only_the_demo_wrote(tmp_path):
    from midtrain.demo.inputs import SAMPLES as DEMO_SAMPLES
    from midtrain.demo.shards import check_nothing_there

    (tmp_path / "shards").mkdir()
    _user_prep(tmp_path / "prep" / "pulls", [str(DEMO_SAMPLES / "pulls")])  # a demo run's prep, killed later
    (tmp_path / "prep" / "_inputs").mkdir()
    check_nothing_there(tmp_path / "shards")  # an empty data.path beside the demo's own prep: built there
    _user_prep(tmp_path / "prep" / "traces", ["/home/me/runs"])
    with pytest.raises(FileNotFoundError, match="prep/traces"):
        check_nothing_there(tmp_path / "shards")


def _group(pgid: int) -> dict[int, str]:
    """pid -> command line of the live processes in process group PGID."""
    found = {}
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) == pgid and stat.rsplit(")", 1)[1].split()[0] != "Z":
                found[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_killing_only_the_main_prep_process_leaves_no_helper_running(tmp_path):
    proc = subprocess.Popen(
        MIDTRAIN + PREP_ARGS + ["--workers", "2", "--output", str(tmp_path / "pulls")],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        # the kill point: datatrove's Manager server and the Pool's forkserver are running beside the main process
        while (
            proc.poll() is None
            and time.time() < deadline
            and not any("forkserver" in c for c in _group(proc.pid).values())
        ):
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before the kill point: the test would prove nothing"
        assert len(_group(proc.pid)) >= 3, _group(proc.pid)
        proc.kill()  # the main process only, as a scheduler's kill of the job step's leader
        proc.wait()
        deadline = time.time() + 60
        while _group(proc.pid) and time.time() < deadline:
            time.sleep(0.1)
        assert not _group(proc.pid), f"still running after their parent died: {_group(proc.pid)}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow
def test_a_second_prep_into_an_output_in_use_is_refused_and_a_dead_holders_lock_taken_over(tmp_path, capsys, caplog):
    from midtrain.cli import main

    out = tmp_path / "pulls"
    lock = out / ".midtrain.lock"
    first = subprocess.Popen(
        MIDTRAIN + PREP_ARGS + ["--output", str(out)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        while first.poll() is None and time.time() < deadline and not (lock.exists() and lock.read_text()):
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGSTOP)  # frozen while holding the output: it cannot finish under the test
        assert first.poll() is None and json.loads(lock.read_text())["pid"] == first.pid
        capsys.readouterr()
        assert main(PREP_ARGS + ["--output", str(out)]) == 3  # refused (formats.outputs.EXIT_REFUSED)
        err = capsys.readouterr().err
        assert f"pid {first.pid} on " in err and str(out) in err, err
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        with caplog.at_level("WARNING", logger="midtrain.runner"):
            assert main(PREP_ARGS + ["--output", str(out)]) == 0
        assert f"taking over the lock of pid {first.pid}" in caplog.text
        assert not lock.exists() and json.loads((out / "stats.json").read_text())["complete"]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()


@pytest.mark.slow
def test_pack_refuses_a_prep_killed_after_some_tasks_wrote_documents(tmp_path):
    out = tmp_path / "pulls"
    # the kill point: the first curated document file exists, the other tasks and the stats stage have not run.
    # Documents are written by the last curation stage only: over 24 tasks, the 23 after the first (and the
    # stats stage) keep the run going for a while after the poll sees the file (over 3, a whole run's rest
    # took less than the poll's 50 ms on an idle machine)
    _kill_when(PREP_PULLS + ["--tasks", "24", "--output", str(out)], lambda: any((out / "documents").glob("*.jsonl*")))
    assert not (out / "stats.json").exists()
    r = _run(_pack_args([str(out)], tmp_path / "shards"))
    assert r.returncode == 1, r.stderr[-2000:]  # today: packs the documents written so far, exit 0
    last = r.stderr.strip().splitlines()[-1]
    assert str(out) in last and "unfinished" in last and f"midtrain prep pulls --input {SAMPLES / 'pulls'}" in last, (
        last
    )
    assert not (tmp_path / "shards" / "manifest.json").exists()


def _interrupt_when(args: list[str], ready, timeout: float = 600) -> subprocess.CompletedProcess:
    """Start a midtrain command and send its process group SIGINT (a terminal's Ctrl-C) once ``ready()`` holds."""
    proc = subprocess.Popen(
        MIDTRAIN + args,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline and not ready():
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before the interrupt point: the test would prove nothing"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err)


@pytest.mark.slow
def test_ctrl_c_exits_130_in_pack_and_train_and_a_rerun_continues(tmp_path):
    # the interrupt point: the first tokenize task done. A pack runs one tokenize task a document file at the
    # most, and over the prep of the sample pull requests (one file) the rest of the run (pack, manifest) ended
    # before the poll's turn on a loaded machine (exit 0, no interrupt). Over 12 files the 11 tokenize tasks
    # after the first (each loads the tokenizer) keep the run going for seconds.
    import random
    import shutil

    from pack_helpers import commit_doc, write_prep
    from train_helpers import tiny_config, write_shards

    rng = random.Random(5)
    prep12 = write_prep(tmp_path / "prep12" / "commits", [commit_doc(i, rng) for i in range(48)], files=12)
    prep = tmp_path / "commits"
    shutil.copytree(prep12, prep)  # tokenizing still to do
    args = _pack_args([str(prep)], tmp_path / "out") + ["tokenize_tasks=12"]
    r = _interrupt_when(args, lambda: bool(list(prep.glob("tokenized/*/logs/*/completions/*"))))
    assert r.returncode == 130 and "midtrain pack: interrupted; rerun the same command" in r.stderr, r.stderr[-2000:]
    assert _run(args).returncode == 0
    ref = tmp_path / "ref"
    assert _run(_pack_args([str(prep12)], ref) + ["tokenize_tasks=12"]).returncode == 0
    assert _tree_bytes(tmp_path / "out", ("*.bin", "*.idx")) == _tree_bytes(ref, ("*.bin", "*.idx"))

    shards = write_shards(tmp_path / "shards", sequences=24, seq_length=64)
    cfg_path = tmp_path / "cfg.yaml"
    tiny_config(
        **{
            "data.path": str(shards),
            "run_dir": str(tmp_path / "run"),
            "optim.train_steps": 400,
            "checkpoint.save_interval": 2,
        }
    ).save_yaml(cfg_path)
    metrics = tmp_path / "run" / "metrics.jsonl"
    r = _interrupt_when(
        ["train", str(cfg_path)], lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 3
    )
    assert r.returncode == 130 and "midtrain train: interrupted" in r.stderr, r.stderr[-2000:]
