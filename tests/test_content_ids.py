"""#53 case 6: content ids are content. Every byte of a file is hashed (never a sample), the proxy's retrieval
repositories are stamped by what they hold (not their path), and a result's stamp records the code."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from midtrain.eval.config import ProxyConfig
from midtrain.eval.proxy import proxy_stamp
from midtrain.formats.checkpoints import file_sha256
from midtrain.formats.documents import write_jsonl_gz
from midtrain.formats.outputs import COMPLETE, REDO, REUSE, decide
from midtrain.formats.rundir import MARKER
from midtrain.formats.stamp import content_id, stale_fields

MIB = 1 << 20


def _sparse(path: Path, size: int, byte_at: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
        fh.seek(byte_at)
        fh.write(b"\x01")
    return path


def test_two_large_files_that_differ_anywhere_have_other_ids(tmp_path):
    # 80 MiB, one byte set at 3 MiB: between the first two of the 16 evenly spaced 1 MiB blocks a sample read
    size, offset = 80 * MIB, 3 * MIB
    a, b = (tmp_path / "a", tmp_path / "b")
    a.mkdir(), b.mkdir()
    _sparse(a / "model.safetensors", size, offset)
    _sparse(b / "model.safetensors", size, offset + 1)
    assert content_id(a) != content_id(b)
    assert content_id(a / "model.safetensors") != content_id(b / "model.safetensors")


def _checkpoint(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "w").write_text("weights")
    (d / MARKER).write_text(json.dumps({"files": {"w": 7}, "sha256": {"w": file_sha256(d / "w")}}))
    return d


def test_retrieval_repos_prepared_again_in_place_are_other_inputs(tmp_path):
    ckpt = _checkpoint(tmp_path / "ckpt")
    repos = tmp_path / "repos"
    (repos / "documents").mkdir(parents=True)
    write_jsonl_gz(repos / "documents" / "00000.jsonl.gz", [{"id": "r1", "text": "def f():\n    return 1\n"}])
    cfg = ProxyConfig().apply_overrides([f"retrieval.repos={repos}"]).validate()
    first = proxy_stamp(ckpt, cfg)
    assert first == proxy_stamp(ckpt, cfg)
    write_jsonl_gz(repos / "documents" / "00000.jsonl.gz", [{"id": "r1", "text": "def f():\n    return 2\n"}])
    assert stale_fields(first, proxy_stamp(ckpt, cfg)) == ["inputs.repos"]


def test_a_result_records_the_code_and_another_commit_is_redone(tmp_path):
    ckpt = _checkpoint(tmp_path / "ckpt")
    want = proxy_stamp(ckpt, ProxyConfig())
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent)
    assert want["code"]["version"] and want["code"]["commit"] == head.stdout.strip()
    older = {"stamp": {**want, "code": {**want["code"], "commit": "0" * 40}}, "state": COMPLETE}
    assert decide("proxy", older, want, tmp_path).action == REDO  # scored by other code: redone
    assert decide("proxy", {"stamp": want, "state": COMPLETE}, want, tmp_path).action == REUSE
