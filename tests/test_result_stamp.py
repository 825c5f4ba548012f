"""One stamp for every reused result (midtrain/formats/stamp.py): a result stands only for the checkpoint content
and settings it was made from, so a run directory that has trained further is scored again."""

from __future__ import annotations

import hashlib
import json

from midtrain.formats.rundir import MARKER, checkpoint_name
from midtrain.formats.stamp import content_id, reusable_result, stamp


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
    assert want["scored_checkpoint"].endswith("iter_0000010")
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
    assert stamp(hf, {}, tokenizer=tok)["tokenizer_content"] == content_id(tok)
