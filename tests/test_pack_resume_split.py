"""#53 cases 8 and 9: a pack resumes on the file -> task split recorded at its first start (another split is
refused, naming the record), and `workers` (a throughput knob) is no part of a pack's identity. Real
datatrove, tokenizer and packer; a killed run is its output without the manifest (the last stage)."""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import pytest
from pack_helpers import commit_doc, pack_argv, write_prep

from midtrain.cli import main
from midtrain.formats.outputs import EXIT_REFUSED
from midtrain.pack.pack_step import SPLIT_FILE


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    rng = random.Random(5)
    prep = write_prep(root / "prep" / "commits", [commit_doc(i, rng) for i in range(40)], files=4)
    assert main(pack_argv([prep], root / "shards")) == 0
    return prep, root / "shards"


def _killed(ref: Path, out: Path) -> Path:
    """REF as a pack killed after its first task: the second task's and the manifest's stages never finished."""
    shutil.copytree(ref, out)
    (out / "manifest.json").unlink()
    (logs,) = [d for d in (out / "logs").iterdir() if not d.name.endswith("-manifest")]
    (logs / "completions" / "00001").unlink()
    shutil.rmtree(out / "logs" / f"{logs.name}-manifest")
    for f in (out / "train").glob("00001.*"):
        f.unlink()
    return out


def _shards(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "train").glob("*"))}


def test_a_finished_pack_rerun_with_other_workers_has_nothing_to_do(packed, tmp_path, caplog):
    prep, ref = packed
    out = shutil.copytree(ref, tmp_path / "shards")
    before = _shards(out)
    caplog.set_level(logging.INFO)
    assert main(pack_argv([prep], out, "workers=2")) == 0  # was: refused, naming no field
    assert "nothing to do" in caplog.text and _shards(out) == before
    assert json.loads((out / "manifest.json").read_text())["stamp"]["notes"]["workers"] == 1


def test_a_killed_pack_resumes_with_another_worker_count(packed, tmp_path):
    prep, ref = packed
    out = _killed(ref, tmp_path / "shards")
    assert main(pack_argv([prep], out, "workers=2")) == 0
    assert _shards(out) == _shards(ref)  # the same bytes as the uninterrupted pack


def test_a_resume_on_another_split_of_the_tokenize_cache_is_refused(packed, tmp_path, capsys):
    src, _ = packed
    prep = shutil.copytree(src.parent, tmp_path / "prep") / src.name  # its own cache, rebuilt below
    # a pack of this copy (its path is its inputs' name in the output's stamp), killed after its first task
    ref = tmp_path / "ref"
    assert main(pack_argv([prep], ref)) == 0
    out = _killed(ref, tmp_path / "shards")
    recorded = json.loads((out / SPLIT_FILE).read_text())
    assert recorded["tasks"] == 2 and sum(map(len, recorded["files"])) == 4  # 4 files tokenized in 4 tasks
    # the shared cache rebuilt by another pack in one tokenize task: the unfinished task would take other files
    # (another split) than the finished one read
    shutil.rmtree(prep / "tokenized")
    assert main(pack_argv([prep], tmp_path / "other", "tokenize_tasks=1")) == 0
    capsys.readouterr()
    rc = main(pack_argv([prep], out))
    err = capsys.readouterr().err
    assert rc == EXIT_REFUSED and SPLIT_FILE in err and "Traceback" not in err, err
    assert not (out / "manifest.json").exists()  # nothing was published from the other split
    shutil.rmtree(prep / "tokenized")  # the cache as it started with (tokenized in 4 tasks again): resumed
    assert main(pack_argv([prep], out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"]["train"]["documents"] == 40, manifest["splits"]
