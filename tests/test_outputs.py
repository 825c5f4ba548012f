"""formats.outputs: the lease (two claimants, stale takeover, fencing) across real processes, the state and the
policy table. Every wait is on a file the other process writes at the moment that matters, never a sleep."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from midtrain.formats import outputs
from midtrain.formats.outputs import COMPLETE, FAILED, REDO, RESUME, REUSE, START, OutputRefused, claim, make_stamp

WAIT_S = 120  # generous: a loaded 2-core machine starts Python slowly


def wait_for(path: Path, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"the helper exited {proc.returncode} before {path.name}: {err}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


# A holder: claims OUT, writes READY, waits for GO, then publishes SRC -> DST (its fence checked) and says how.
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from midtrain.formats import outputs
    out, ready, go, done = map(Path, sys.argv[1:5])
    lease = outputs.Lease(out, "test output", heartbeat=3600).acquire()
    (out / "part").write_text("x")
    ready.write_text("held")
    while not go.exists():
        time.sleep(0.02)
    try:
        lease.fence.publish(out / "part", out / "final")
        done.write_text("published")
    except outputs.OutputRefused as e:
        done.write_text("refused: " + str(e))
    """
)

# A pool worker's case: the main process claims, starts a worker with the fence, and is killed; the worker lives.
POOL = textwrap.dedent(
    """
    import multiprocessing as mp, sys, time
    from pathlib import Path
    from midtrain.formats import outputs

    def worker(fence, out, go, done):
        (out / "part").write_text("x")
        (out / "worker_ready").write_text("ready")
        while not go.exists():
            time.sleep(0.02)
        try:
            fence.publish(out / "part", out / "final")
            done.write_text("published")
        except outputs.OutputRefused as e:
            done.write_text("refused: " + str(e))

    if __name__ == "__main__":
        out, go, done = map(Path, sys.argv[1:4])
        with outputs.claim(out, "pack", outputs.make_stamp("pack", {}, {})) as c:
            p = mp.get_context("fork").Process(target=worker, args=(c.lease.fence, out, go, done))
            p.start()
            p.join()
    """
)


def start(script: str, *args: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)], stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def test_second_claimant_refused_naming_holder_then_claims_after_release(tmp_path: Path) -> None:
    out = tmp_path / "out"
    ready, go, done = tmp_path / "ready", tmp_path / "go", tmp_path / "done"
    proc = start(HOLDER, out, ready, go, done)
    try:
        wait_for(ready, proc)
        with pytest.raises(OutputRefused) as e:
            with claim(out, "proxy", make_stamp("proxy", {}, {})):
                pass
        assert f"pid {proc.pid} on {socket.gethostname()}" in str(e.value) and "test output" in str(e.value)
        go.write_text("go")
        wait_for(done, proc)
        assert done.read_text() == "published" and (out / "final").exists()
        proc.wait(WAIT_S)
    finally:
        proc.kill()
    # the holder exited without releasing (no release call): its pid is dead, so the lease is taken over; the
    # files it left without a record are an output of unknown inputs: redone (refused where the policy refuses)
    with claim(out, "proxy", make_stamp("proxy", {}, {})) as c:
        assert c.action == REDO and c.decision.changes[0].startswith("no output.json stamp")
        c.complete()
    with pytest.raises(OutputRefused, match="what its files were made from is unknown"), claim(tmp_path, "sft", {}):
        pass
    assert not (out / outputs.LEASE).exists()


def test_killed_holder_is_taken_over_and_cannot_publish_after(tmp_path: Path, caplog) -> None:
    """kill -9 of a pack's main process: its orphaned pool worker keeps running; the next claimant takes the lease
    over (the holder's pid is gone) and the worker's publish is refused, so nothing it wrote lands."""
    out = tmp_path / "out"
    go, done = tmp_path / "go", tmp_path / "done"
    proc = start(POOL, out, go, done)
    try:
        wait_for(out / "worker_ready", proc)
        os.kill(proc.pid, signal.SIGKILL)  # the main process only: the worker is orphaned, still alive
        proc.wait(WAIT_S)
        with caplog.at_level(logging.WARNING), claim(out, "pack", make_stamp("pack", {}, {})) as c:
            assert "taking over the lock of pid" in caplog.text and c.action == RESUME  # its record: running
            go.write_text("go")
            wait_for(done)
            assert done.read_text().startswith("refused: ")
            assert "lost its lease" in done.read_text() and not (out / "final").exists()
            c.complete()
    finally:  # the orphaned worker too (it is in the helper's session), whatever failed above
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_lease_of_another_host_taken_over_only_without_heartbeat(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    lease = out / outputs.LEASE
    lease.write_text(json.dumps({"host": "node-17", "pid": 1, "job": "4242", "start": time.time(), "token": "t"}))
    with pytest.raises(OutputRefused, match="pid 1 on node-17, Slurm job 4242"):
        with claim(out, "train", make_stamp("t", {}, {}), stale_after=60):
            pass
    old = time.time() - 61
    os.utime(lease, (old, old))  # its last heartbeat a minute ago
    with claim(out, "train", make_stamp("t", {}, {}), stale_after=60) as c:
        assert c.action == START


def test_a_requeued_job_takes_over_its_predecessors_lease_at_once(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    fresh = {"host": "node-3", "pid": 5, "job": "77", "restart": 0, "start": time.time(), "token": "t"}
    (out / outputs.LEASE).write_text(json.dumps(fresh))
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    with pytest.raises(OutputRefused, match="Slurm job 77"):  # the same attempt elsewhere: alive
        with claim(out, "train", make_stamp("t", {}, {})):
            pass
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    with claim(out, "train", make_stamp("t", {}, {})) as c:
        assert c.action == START


def test_state_and_policy(tmp_path: Path) -> None:
    out = tmp_path / "out"
    want = make_stamp("proxy", {"checkpoint": "a"}, {"seq": 8})
    assert want["code"]["version"]
    with pytest.raises(ValueError), claim(out, "proxy", want):
        raise ValueError("scorer crashed\nsecond line")
    rec = outputs.read_record(out)
    assert rec is not None and rec["state"] == FAILED and rec["reason"] == "ValueError: scorer crashed"
    with claim(out, "proxy", want) as c:  # failed, equal: the proxy redoes (the sft would resume)
        assert c.action == REDO
        c.complete()
    assert (outputs.read_record(out) or {})["state"] == COMPLETE
    with claim(out, "proxy", want) as c:
        assert c.action == REUSE
    other = make_stamp("proxy", {"checkpoint": "b"}, {"seq": 8})
    with claim(out, "proxy", other) as c:
        assert c.action == REDO and c.decision.changes == ["inputs.checkpoint: recorded 'a', now 'b'"]
    # the sft's policy refuses another stamp, naming the field; --overwrite redoes it
    sft_a, sft_b = make_stamp("sft probe", {"start": "a"}, {}), make_stamp("sft probe", {"start": "b"}, {})
    with claim(tmp_path / "sft", "sft", sft_a) as c:
        c.complete()
    with pytest.raises(OutputRefused, match=r"inputs.start: recorded 'a', now 'b'"):
        with claim(tmp_path / "sft", "sft", sft_b):
            pass
    with claim(tmp_path / "sft", "sft", sft_b, redo=True) as c:
        assert c.action == REDO
    # an unfinished equal sft resumes; the code is compared only where the policy says so
    with claim(tmp_path / "sft", "sft", sft_b) as c:
        assert c.action == RESUME
    newer = {**want, "code": {"version": want["code"]["version"], "commit": "0" * 40}}
    with claim(out, "proxy", newer) as c:
        assert c.action == REDO and any(ch.startswith("code:") for ch in c.decision.changes)


def test_refusal_is_one_line_and_its_exit_code(tmp_path: Path) -> None:
    from midtrain.cli import main

    out = tmp_path / "out"
    out.mkdir()
    (out / outputs.LEASE).write_text(json.dumps({"host": "elsewhere", "pid": 9, "start": time.time(), "token": "t"}))
    proc = subprocess.run(
        [sys.executable, "-m", "midtrain.cli", "report", f"a={tmp_path / 'a'}", "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert main is not None
    assert proc.returncode == outputs.EXIT_REFUSED, proc.stderr
    err = [line for line in proc.stderr.splitlines() if "midtrain report" in line]
    assert len(err) == 1 and "pid 9 on elsewhere" in err[0] and "Traceback" not in proc.stderr
