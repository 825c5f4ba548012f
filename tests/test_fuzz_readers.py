"""Fuzz every reader with random and truncated inputs: no crash, every bad record counted, good ones kept.

Inputs are the demo's real samples cut at random byte offsets and random bytes, mixed with intact samples.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "data_prep" / "samples"


def _prep(source: str, inputs: list[Path], out: Path) -> dict:
    # In process (the readers are pure Python: no crash a subprocess would contain): an exception escaping
    # `midtrain prep` fails the test with its traceback, a non-zero exit status fails the assert.
    from midtrain.cli import main

    assert main(["prep", source, *_no_curation(), "--input", *map(str, inputs), "--output", str(out)]) == 0
    return json.loads((out / "stats.json").read_text())


def _no_curation() -> list[str]:
    # Fuzzing is about the readers: curation would drop some intact samples and blur the counts.
    from midtrain.curate.stages import CurationConfig

    return [f"{name}.enabled=false" for name in CurationConfig().steps()]


def _fuzzed_copies(src: Path, dst: Path, rng: random.Random, n: int) -> int:
    """Write n damaged variants of src (truncations, byte flips, random bytes); return how many."""
    data = src.read_bytes()
    for i in range(n):
        kind = i % 3
        if kind == 0:
            bad = data[: rng.randrange(1, max(2, len(data) - 1))]
        elif kind == 1:
            buf = bytearray(data)
            for _ in range(8):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            bad = bytes(buf)
        else:
            bad = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2048)))
        (dst / f"fuzz{i}{''.join(src.suffixes)}").write_bytes(bad)
    return n


@pytest.mark.slow
@pytest.mark.parametrize(
    "source,sample",
    [
        ("pulls", SAMPLES / "pulls" / "sample_prs.jsonl"),
        ("traces", SAMPLES / "traces" / "openhands_sample.jsonl"),
        ("traces", SAMPLES / "traces" / "acme__minicalc-14.traj.json"),
    ],
)
def test_prep_readers_survive_fuzzed_inputs(tmp_path, source, sample):
    rng = random.Random(f"{source}-{sample.name}")
    inputs = tmp_path / "in"
    inputs.mkdir()
    shutil.copy(sample, inputs / sample.name)
    n_bad = _fuzzed_copies(sample, inputs, rng, 9)
    clean = _prep(source, [sample], tmp_path / "clean")
    stats = _prep(source, [inputs], tmp_path / "out")
    # Every intact record still comes out; damaged files yield their readable records or a counted error.
    assert stats["documents_out"] >= clean["documents_out"] > 0
    problems = len(stats["errors"]) + sum(stats["skips"].values()) + sum(stats["drops"].values())
    assert problems >= 1
    per_input = stats["inputs"]
    assert sum(v.get("errors", 0) for v in per_input.values()) + sum(stats["skips"].values()) >= n_bad // 3


@pytest.mark.slow
def test_buildlog_reader_survives_binary_and_truncated_logs(tmp_path):
    logs = sorted((SAMPLES / "buildlogs" / "logs").glob("*"))
    assert logs
    inputs = tmp_path / "in"
    inputs.mkdir()
    for log in logs:
        shutil.copy(log, inputs / log.name)
    rng = random.Random(5)
    _fuzzed_copies(logs[0], inputs, rng, 6)
    clean = _prep("buildlogs", logs, tmp_path / "clean")
    stats = _prep("buildlogs", [inputs], tmp_path / "out")
    assert stats["documents_out"] >= clean["documents_out"] > 0


def test_packed_reader_rejects_truncated_shards_with_a_message(tmp_path):
    from train_helpers import write_shards

    from midtrain.formats.shard_reader import PackedDataset

    shards = write_shards(tmp_path / "shards", sequences=6, seq_length=64)
    ds = PackedDataset(shards)
    assert len(ds) == 6 and ds[0]["tokens"].shape[0] == 64
    rng = np.random.default_rng(0)
    for suffix in (".bin", ".idx"):
        broken = tmp_path / f"broken{suffix}"
        shutil.copytree(shards, broken)
        target = broken / "train" / f"00000{suffix}"
        data = target.read_bytes()
        target.write_bytes(data[: int(rng.integers(1, len(data)))])
        with pytest.raises(Exception) as info:
            d = PackedDataset(broken)
            for i in range(len(d)):
                d[i]
        assert str(broken) in str(info.value) or target.name in str(info.value), str(info.value)
