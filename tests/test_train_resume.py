"""Resuming a run as a cluster does it: on another number of ranks (data- or tensor-parallel), and from run
directories that a full disk or a killed writer damaged. A run that cannot resume stops naming why."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import (
    destroy_process_groups,  # noqa: F401 (autouse fixture)
    metrics,
    tiny_config,
    train_in_process,
    write_shards,
)

from midtrain.config import ConfigError
from midtrain.train.checkpoint import MARKER, CheckpointError, list_checkpoints

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
STEPS, SAVED = 6, 3
# Per-step losses across layouts: the same samples in every step (the loader hands out the global batch in
# one order at any DP size), but gradients are summed in another order over ranks, so float32 results agree
# to rounding, not bitwise (the same tolerance as tests/test_train_parallel.py).
REL = 1e-6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(cfg_path: Path, run_dir: Path, nproc: int, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [
        str(TORCHRUN),
        "--nproc-per-node",
        str(nproc),
        "--master-port",
        str(_free_port()),
        "-m",
        "midtrain.cli",
        "train",
        str(cfg_path),
        f"run_dir={run_dir}",
        *overrides,
    ]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out


def _killed_after_checkpoint(run_dir: Path) -> None:
    """Leave RUN_DIR as a job killed during step SAVED + 2 leaves it: the checkpoint of step SAVED, and
    metrics.jsonl lines up to the step it was killed in."""
    for step, path in list_checkpoints(run_dir):
        if step != SAVED:
            shutil.rmtree(path)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text("\n".join(lines[: SAVED + 1]) + "\n")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Shards, the config file and the uninterrupted single-process run every layout is compared with."""
    tmp = tmp_path_factory.mktemp("resume")
    shards = write_shards(tmp / "shards", sequences=24, seq_length=64)
    cfg = tiny_config(
        **{
            "data.path": str(shards),
            "optim.train_steps": STEPS,
            "optim.global_batch_size": 4,
            "checkpoint.save_interval": SAVED,
            "checkpoint.save_final": False,
        }
    )
    cfg_path = tmp / "cfg.yaml"
    cfg.save_yaml(cfg_path)
    train_in_process(cfg, tmp / "reference")
    return cfg, cfg_path, metrics(tmp / "reference")


def _assert_resumed(run_dir: Path) -> None:
    """The run resumed at step SAVED: the line of step SAVED + 1 the killed job wrote was set aside."""
    aside = run_dir / f"metrics.after_step_{SAVED:07d}.jsonl"
    assert aside.is_file(), f"{run_dir.name} did not resume at step {SAVED}"
    assert [json.loads(line)["step"] for line in aside.read_text().splitlines()] == [SAVED + 1]


def _assert_continues(rows: list[dict], reference: list[dict], what: str) -> None:
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1)), what
    for got, ref in zip(rows[SAVED:], reference[SAVED:]):
        # the same samples: token counts are exact
        assert got["trained_tokens"] == ref["trained_tokens"] and got["flops"] == ref["flops"], (what, got["step"])
        assert got["loss"] == pytest.approx(ref["loss"], rel=REL), (what, got["step"])
        assert got["lr"] == pytest.approx(ref["lr"], rel=1e-12), (what, got["step"])


@pytest.mark.slow
def test_dp2_checkpoint_resumes_on_1_and_on_4_ranks(setup, tmp_path):
    cfg, cfg_path, reference = setup
    dp2 = tmp_path / "dp2"
    _torchrun(cfg_path, dp2, 2, "parallel.data=2")
    _assert_continues(metrics(dp2), reference, "DP=2 uninterrupted")
    _killed_after_checkpoint(dp2)
    one, four = tmp_path / "one", tmp_path / "four"
    shutil.copytree(dp2, one)
    shutil.copytree(dp2, four)
    result = train_in_process(cfg, one)  # one rank: DP=1
    assert result["step"] == STEPS
    _assert_resumed(one)
    _assert_continues(metrics(one), reference, "DP=2 -> DP=1")
    out = _torchrun(cfg_path, four, 4, "parallel.data=4")
    assert f"resuming at step {SAVED}" in out.stderr and "DP=2 on TP=1 PP=1 CP=1 DP=4" in out.stderr
    _assert_resumed(four)
    _assert_continues(metrics(four), reference, "DP=2 -> DP=4")
    assert [s for s, _ in list_checkpoints(four)] == [SAVED, STEPS]  # every 3 steps, keep_last 2


@pytest.mark.slow
def test_dp2_checkpoints_after_an_epoch_wrap_resume_on_1_and_4_ranks(tmp_path):
    """11 sequences, 4 a step: epochs end mid-batch. DP=2's checkpoints at steps 3 and 9 resume on 4 and on 1
    ranks with the losses (so the samples) and token counts of the uninterrupted single-rank run."""
    shards = write_shards(tmp_path / "shards", sequences=11, seq_length=64)
    cfg = tiny_config(
        **{
            "data.path": str(shards),
            "optim.train_steps": 10,
            "optim.global_batch_size": 4,
            "checkpoint.save_interval": 3,
            "checkpoint.keep_last": 4,
            "checkpoint.save_final": False,
        }
    )
    cfg_path = tmp_path / "cfg.yaml"
    cfg.save_yaml(cfg_path)
    train_in_process(cfg, tmp_path / "reference")
    reference = metrics(tmp_path / "reference")
    dp2 = tmp_path / "dp2"
    _torchrun(cfg_path, dp2, 2, "parallel.data=2")
    assert [s for s, _ in list_checkpoints(dp2)] == [3, 6, 9]
    for saved, nproc in ((3, 4), (9, 1)):
        run_dir = tmp_path / f"from{saved}_dp{nproc}"
        shutil.copytree(dp2, run_dir)
        for step, path in list_checkpoints(run_dir):
            if step != saved:
                shutil.rmtree(path)
        if nproc == 1:
            train_in_process(cfg, run_dir)
        else:
            _torchrun(cfg_path, run_dir, nproc, f"parallel.data={nproc}")
        rows = {r["step"]: r for r in metrics(run_dir)}  # the steps after `saved` are the resumed run's
        for ref in reference[saved:]:
            got = rows[ref["step"]]
            assert got["trained_tokens"] == ref["trained_tokens"], (saved, nproc, ref["step"])
            assert got["loss"] == pytest.approx(ref["loss"], rel=REL), (saved, nproc, ref["step"])


@pytest.mark.slow
def test_tp2_checkpoint_resumes_on_tp1(setup, tmp_path):
    cfg, cfg_path, reference = setup
    tp2 = tmp_path / "tp2"
    _torchrun(cfg_path, tp2, 2, "parallel.tensor=2")
    _killed_after_checkpoint(tp2)
    result = train_in_process(cfg, tp2)
    assert result["step"] == STEPS
    _assert_resumed(tp2)
    _assert_continues(metrics(tp2), reference, "TP=2 -> TP=1")


def _damage_distcp(ckpt: Path, offset: int = 512) -> Path:
    """64 garbage bytes inside the largest tensor file, its size unchanged."""
    victim = max(ckpt.glob("*.distcp"), key=lambda f: f.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[offset : offset + 64] = os.urandom(64)
    victim.write_bytes(bytes(data))
    return victim


@pytest.fixture(scope="module")
def run8(tmp_path_factory):
    """8 steps (checkpoints at 4 and 8) of the tiny model on tiny shards: a run dir to damage."""
    tmp = tmp_path_factory.mktemp("run8")
    shards = write_shards(tmp / "shards", sequences=24, seq_length=64)
    cfg = tiny_config(**{"data.path": str(shards)})
    train_in_process(cfg, tmp / "run")
    return cfg, tmp / "run"


def test_every_checkpoint_damaged_stops_naming_each_and_keeps_the_run_dir(run8, tmp_path):
    cfg, src = run8
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    before = (run_dir / "metrics.jsonl").read_text()
    for _, path in list_checkpoints(run_dir):
        victim = max(path.glob("*.distcp"), key=lambda f: f.stat().st_size)
        victim.write_bytes(victim.read_bytes()[:100])  # cut by a full disk
    with pytest.raises(
        CheckpointError,
        match=r"none of its 2 checkpoint\(s\).*iter_0000008: .*bytes, expected"
        r".*iter_0000004: ",
    ):
        train_in_process(cfg, run_dir)
    assert (run_dir / "metrics.jsonl").read_text() == before  # history untouched
    assert [s for s, _ in list_checkpoints(run_dir)] == [4, 8]  # nothing pruned, nothing new


def test_garbage_bytes_of_the_same_size_are_detected_by_checksum(run8, tmp_path):
    """64 garbage bytes in the newest checkpoint: its checksum fails, the run resumes from the previous one
    with the losses of the original run (not silently from damaged weights)."""
    cfg, src = run8
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    original = {r["step"]: r["loss"] for r in metrics(src)}
    _damage_distcp(run_dir / "checkpoints" / "iter_0000008")
    result = train_in_process(cfg, run_dir, **{"optim.train_steps": 8})
    assert result["step"] == 8
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert {r["step"]: r["loss"] for r in rows} == original  # bitwise: resumed from step 4, same process layout
    assert (run_dir / "metrics.after_step_0000004.jsonl").is_file()


def test_a_complete_checkpoint_that_fails_to_load_stops_the_run(run8, tmp_path):
    """A checkpoint written before checksums (sizes only) whose content is garbage: the load error stops the
    run naming the checkpoint, instead of trying older ones and restarting from scratch."""
    cfg, src = run8
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    for _, path in list_checkpoints(run_dir):
        meta = json.loads((path / MARKER).read_text())
        del meta["sha256"]
        (path / MARKER).write_text(json.dumps(meta))
        victim = max(path.glob("*.distcp"), key=lambda f: f.stat().st_size)
        victim.write_bytes(b"\0" * victim.stat().st_size)
    with pytest.raises(CheckpointError, match=r"checkpoint .*iter_0000008 cannot be loaded: "):
        train_in_process(cfg, run_dir)


def test_pruning_never_deletes_checkpoints_newer_than_the_one_saved(run8, tmp_path):
    """Resumed from step 4 because step 8 is damaged: saving step 6 keeps 8 (newer, a human may restore it)
    and prunes only what is older than the kept ones."""
    cfg, src = run8
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    _damage_distcp(run_dir / "checkpoints" / "iter_0000008")
    train_in_process(
        cfg,
        run_dir,
        **{
            "optim.train_steps": 8,
            "checkpoint.save_interval": 2,
            "checkpoint.keep_last": 1,
            "checkpoint.save_final": False,
        },
    )
    # steps 5..8 saved 6 and 8 again (8 replaced the damaged one); keep_last=1 pruned 4 and 6 afterwards
    assert [s for s, _ in list_checkpoints(run_dir)] == [8]
    from midtrain.train.checkpoint import _prune, verify_checksums

    assert verify_checksums(run_dir / "checkpoints" / "iter_0000008") is None
    # the rule itself: after saving step 2 next to a newer step 8, step 8 stays
    shutil.copytree(run_dir / "checkpoints" / "iter_0000008", run_dir / "checkpoints" / "iter_0000002")
    _prune(run_dir, 1, 2)
    assert [s for s, _ in list_checkpoints(run_dir)] == [2, 8]


def test_resuming_with_another_model_shape_is_refused_before_anything_is_written(run8, tmp_path):
    cfg, src = run8
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    with pytest.raises(
        ConfigError, match=r"model.num_layers: .*holds a run with another value.*model.num_layers: recorded 2, now 3"
    ):
        train_in_process(cfg, run_dir, **{"model.num_layers": 3})
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("damage", ["empty", "cut"])
def test_an_empty_or_cut_config_is_refused(run8, tmp_path, damage):
    from recipes import load_train_config as load_config

    cfg, src = run8
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    text = (run_dir / "config.yaml").read_text()
    cut = text[: text.index("\n", len(text) // 2) + 1]  # whole lines: still valid YAML, sections missing
    (run_dir / "config.yaml").write_text("" if damage == "empty" else cut)
    expected = "is empty" if damage == "empty" else r"lacks .*cut short"
    with pytest.raises(ConfigError, match=expected):
        load_config(str(run_dir / "config.yaml"), [])  # `midtrain train RUN_DIR/config.yaml` (a replay)
    with pytest.raises(ConfigError, match=expected):
        train_in_process(cfg, run_dir)  # a resume from the recipe: the run's config cannot be compared


def test_config_is_written_atomically_and_whole_files_stay_readable(tmp_path):
    from midtrain.train.config import END_OF_CONFIG, read_run_config

    cfg = tiny_config()
    path = tmp_path / "config.yaml"
    cfg.save_yaml(path)
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]  # no temporary file left behind
    assert path.read_text().endswith(END_OF_CONFIG + "\n") and read_run_config(path) == cfg
    # A whole file written before a field existed (a run from an older midtrain) takes the field's default,
    # with or without the end line; only what a cut can take (the end of the file) is refused.
    older = path.read_text().replace("  keep_last: 2\n", "")
    path.write_text(older)
    assert read_run_config(path).checkpoint.keep_last == 2
    path.write_text(older.replace(END_OF_CONFIG + "\n", ""))
    assert read_run_config(path).checkpoint.keep_last == 2
    path.write_text(older.replace(END_OF_CONFIG + "\n", "").replace("  max_skipped: 10\n", ""))
    with pytest.raises(ConfigError, match="lacks guard.max_skipped: it is cut short"):
        read_run_config(path)


@pytest.mark.slow
def test_training_on_a_full_disk_says_so(run8, tmp_path):
    """A checkpoint write that hits the file-size limit (as a full disk does) stops with an I/O error naming the
    checkpoint and the limit, not torch's `inline_container.cc ... unexpected pos`; the partial write is removed."""
    import resource
    import signal

    cfg, _ = run8
    run_dir = tmp_path / "full"
    cfg_path = tmp_path / "cfg.yaml"
    cfg.apply_overrides([f"run_dir={run_dir}", "optim.train_steps=2", "checkpoint.save_interval=2"]).save_yaml(cfg_path)

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # above metrics.jsonl, below a tensor file

    r = subprocess.run(
        [sys.executable, "-m", "midtrain.cli", "train", str(cfg_path)],
        cwd=REPO,
        text=True,
        capture_output=True,
        preexec_fn=limit,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 1, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert (
        last.startswith(
            "midtrain train: I/O error: checkpoint could not be written (this process may write "
            "files of at most 100000 bytes"
        )
        and "iter_0000002.tmp" in last
    ), last
    assert "Traceback" not in r.stderr
    assert not list((run_dir / "checkpoints").iterdir())
