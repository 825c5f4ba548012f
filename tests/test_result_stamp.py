"""One "finished and still valid?" for every stage (midtrain/formats/stamp.py): a result stands only for the
content and settings it was made from (a run directory that has trained further is scored again), the newest
complete checkpoint is found one way for every reader, and stamps of an older midtrain are still read."""

from __future__ import annotations

import functools
import hashlib
import json

import pytest

from midtrain.formats.rundir import MARKER, checkpoint_name, run_dir_of
from midtrain.formats.stamp import (
    CheckpointError,
    checkpoint_problem,
    content_id,
    latest_checkpoint,
    output_stamp,
    reusable_result,
    sha256_files,
    stale_fields,
    stamp,
)


def _checkpoint(run, step: int, payload: bytes):
    """A complete midtrain checkpoint as the trainer leaves it: files plus complete.json's sizes and SHA-256s."""
    d = run / "checkpoints" / checkpoint_name(step)
    d.mkdir(parents=True)
    (d / "weights.distcp").write_bytes(payload)
    (d / MARKER).write_text(
        json.dumps(
            {
                "step": step,
                "files": {"weights.distcp": len(payload)},
                "sha256": {"weights.distcp": hashlib.sha256(payload).hexdigest()},
            }
        )
    )
    return d


def test_a_result_for_a_run_directory_is_stale_once_it_trained_further(tmp_path):
    run = tmp_path / "run"
    _checkpoint(run, 10, b"weights at step 10")
    result = tmp_path / "proxy_results.json"
    want = stamp(run, {"max_sequences": 4})
    assert want["notes"]["scored_checkpoint"].endswith("iter_0000010")
    result.write_text(json.dumps({**want, "loss": 1.0}))
    assert reusable_result(result, stamp(run, {"max_sequences": 4}))["loss"] == 1.0  # same content, same settings
    assert reusable_result(result, stamp(run, {"max_sequences": 8})) is None  # other settings
    _checkpoint(run, 12, b"weights at step 12")  # the same path now names iter_12
    assert reusable_result(result, stamp(run, {"max_sequences": 4})) is None


def test_content_id_follows_content_not_place(tmp_path):
    a = _checkpoint(tmp_path / "a", 1, b"same bytes")
    b = _checkpoint(tmp_path / "b", 1, b"same bytes")
    c = _checkpoint(tmp_path / "c", 1, b"other bytes")
    assert content_id(a) == content_id(b) != content_id(c)
    hf = tmp_path / "hf"  # an HF export (no complete.json): its files are hashed
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"x" * 100)
    before = content_id(hf)
    (hf / "model.safetensors").write_bytes(b"y" * 100)  # same size, other weights
    assert content_id(hf) != before
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    assert stamp(hf, {}, tokenizer=tok)["inputs"]["tokenizer"] == content_id(tok)


def test_stale_fields_name_what_changed_and_never_the_notes():
    old = output_stamp("pack", {"a": "111", "tokenizer": "k"}, {"seed": 1}, notes={"where": "/x"})
    assert stale_fields(old, output_stamp("pack", {"a": "111", "tokenizer": "k"}, {"seed": 1}, {"where": "/y"})) == []
    assert stale_fields(old, output_stamp("pack", {"a": "222", "tokenizer": "k"}, {"seed": 2})) == [
        "inputs.a",
        "config.seed",
    ]
    assert stale_fields({"content": "x", "config": {}}, old) == ["made", "inputs", "config.seed"]  # an older stamp


def test_latest_checkpoint_skips_what_its_check_refuses_and_names_each_when_required(tmp_path):
    run = tmp_path / "run"
    four, eight = _checkpoint(run, 4, b"four"), _checkpoint(run, 8, b"eight")
    assert latest_checkpoint(run) == eight and run_dir_of(eight) == run and run_dir_of(run) == run
    (eight / "weights.distcp").write_bytes(b"EIGHT")  # same size, other bytes: only the content check sees it
    assert latest_checkpoint(run) == eight
    content = functools.partial(checkpoint_problem, checksums=sha256_files)
    assert latest_checkpoint(run, check=content) == four  # resume's choice: the previous complete one
    (four / "weights.distcp").write_bytes(b"fo")
    assert latest_checkpoint(run, check=content) is None
    with pytest.raises(
        CheckpointError, match=r"none of its 2 checkpoint\(s\).*iter_0000008: .*SHA-256.*iter_0000004: "
    ):
        latest_checkpoint(run, check=content, required=True)
    with pytest.raises(CheckpointError, match=r"checkpoint .*iter_0000004 is damaged: .*2 bytes, expected 4"):
        latest_checkpoint(four, required=True)
    with pytest.raises(CheckpointError, match="no midtrain checkpoint"):
        latest_checkpoint(tmp_path / "empty", required=True)


def test_a_prep_json_of_an_older_midtrain_is_still_read(tmp_path):
    """prep.json keeps its settings at the top level (its readers expect them there); one written before input
    identities were recorded is compared on its settings only."""
    from midtrain.config import ConfigError
    from midtrain.sources.prep import build_run, read_prep_stamp

    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.jsonl").write_text("{}\n")
    run = build_run("pulls", [str(inputs)], tmp_path / "out")
    want = run.stamp()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "prep.json").write_text(json.dumps(want["config"]))  # no input_identity
    assert read_prep_stamp(tmp_path / "out" / "prep.json")["inputs"] is None
    assert run.resume_plan(overwrite=False) == (want, False)
    (inputs / "b.jsonl").write_text("{}\n")
    assert run.resume_plan(overwrite=False)[1] is False  # still the settings alone
    (tmp_path / "out" / "prep.json").write_text(json.dumps({**want["config"], "input_identity": want["inputs"]}))
    with pytest.raises(ConfigError, match=r"inputs changed .*2 files, was 1"):
        run.resume_plan(overwrite=False)
    (tmp_path / "out" / "prep.json").write_text(json.dumps({**want["config"], "tasks": 3}))
    with pytest.raises(ConfigError, match=r"other settings \(tasks differ\)"):
        run.resume_plan(overwrite=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["prep.json"]  # deciding changed nothing
