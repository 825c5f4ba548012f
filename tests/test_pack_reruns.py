"""`midtrain pack` reruns and inputs: another run's output is refused unless --overwrite, an unfinished prep
directory is refused naming the command that finishes it, and the reader stops at a shard the manifest
disagrees with."""

from __future__ import annotations

import json
import random
import shlex
import shutil
from pathlib import Path

import pytest
from pack_helpers import commit_doc, pack_argv, write_prep

from midtrain.cli import build_parser, main
from midtrain.commands.prep import rerun_command
from midtrain.formats.shard_reader import PackedDataset


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("reruns")
    rng = random.Random(3)
    prep = write_prep(root / "prep" / "commits", [commit_doc(i, rng) for i in range(40)], files=2)
    assert main(pack_argv([prep], root / "shards", "seed=1")) == 0
    return prep, root / "shards"


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and "logs" not in p.relative_to(out).parts
    }


def test_pack_with_other_settings_is_refused_unless_overwrite(packed, tmp_path, capsys):
    prep, ref = packed
    out = tmp_path / "shards"
    shutil.copytree(ref, out)
    before = _files(out)
    capsys.readouterr()
    assert main(pack_argv([prep], out, "seed=2")) == 3  # refused (formats.outputs.EXIT_REFUSED)
    err = capsys.readouterr().err
    assert str(out) in err and "seed" in err and "--overwrite" in err, err
    assert _files(out) == before  # the finished output (a running job may read it) is untouched
    # the same settings: complete, nothing to do
    assert main(pack_argv([prep], out, "seed=1")) == 0
    assert _files(out) == before
    assert main(pack_argv([prep], out, "seed=2", "--overwrite")) == 0
    assert json.loads((out / "manifest.json").read_text())["seed"] == 2


def test_an_output_and_a_cache_stamped_by_an_older_midtrain_are_still_recognised(packed, tmp_path):
    """A manifest without its stamp and a tokenize cache whose complete.json holds the former {"fingerprint",
    "tokenizer", "boundaries"}: the same run is complete, and a pack into another output reuses the cache."""
    src, ref = packed
    prep = shutil.copytree(src.parent, tmp_path / "prep") / src.name  # copy2: the documents keep their mtimes
    out = shutil.copytree(ref, tmp_path / "shards")
    (out / "output.json").unlink()  # the ledger's record: an older midtrain wrote none
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest.pop("stamp")["inputs"]["tokenizer"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    (done,) = (prep / "tokenized").glob("*/complete.json")
    stamp = json.loads(done.read_text())
    legacy = json.dumps({"fingerprint": stamp["inputs"]["documents"], **stamp["notes"]})
    done.write_text(legacy)
    before, tokens = _files(out), {p: p.stat().st_mtime_ns for p in done.parent.glob("0*")}
    assert main(pack_argv([prep], out, "seed=1")) == 0
    assert _files(out) == before  # complete: nothing redone
    assert main(pack_argv([prep], tmp_path / "other", "seed=1")) == 0
    assert done.read_text() == legacy and {p: p.stat().st_mtime_ns for p in done.parent.glob("0*")} == tokens
    assert (tmp_path / "other" / "manifest.json").is_file()


def test_pack_refuses_an_unfinished_run_of_other_settings(packed, tmp_path, capsys):
    prep, ref = packed
    out = tmp_path / "shards"
    shutil.copytree(ref, out)
    (out / "manifest.json").unlink()  # a run killed before its manifest: its tasks' shards are there
    capsys.readouterr()
    assert main(pack_argv([prep], out, "seed=2")) == 3
    err = capsys.readouterr().err
    assert "unfinished pack" in err and "--overwrite" in err, err
    assert (out / "train" / "00000.bin").exists()


def test_pack_refuses_an_unfinished_prep_dir_naming_the_command(tmp_path, capsys):
    rng = random.Random(4)
    prep = write_prep(tmp_path / "pulls", [commit_doc(i, rng) for i in range(4)])
    # what `midtrain prep` leaves when killed after some tasks wrote documents: its settings, no stats.json
    (prep / "prep.json").write_text(json.dumps({"source": "pulls", "inputs": ["/data/my prs.jsonl"], "tasks": 4}))
    capsys.readouterr()
    assert main(pack_argv([prep], tmp_path / "out")) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(prep) in err and "unfinished" in err, err
    assert f"midtrain prep pulls --input '/data/my prs.jsonl' --output {prep} --tasks 4" in err, err
    assert not (tmp_path / "out" / "manifest.json").exists()
    # an interrupted stats.json (complete never written) is no completion record either
    (prep / "stats.json").write_text('{"source": "pulls"')
    assert main(pack_argv([prep], tmp_path / "out")) == 1
    (prep / "stats.json").write_text(json.dumps({"source": "pulls", "complete": True, "documents_out": 4}))
    assert main(pack_argv([prep], tmp_path / "out")) == 0


def test_an_unfinished_prep_hint_is_the_whole_command_that_made_it(tmp_path, capsys):
    """The hint for an unfinished prep is the command line prep recorded, every flag kept (it dropped
    --executor slurm, --site and the overrides): parsed again, it is the same run."""
    site = tmp_path / "site.yaml"
    site.write_text("name: t\n")
    inputs = tmp_path / "my prs.jsonl"
    argv = ["prep", "pulls", "pulls.max_patch_bytes=5000", "--input", str(inputs), "--output", str(tmp_path / "pulls")]
    argv += ["--executor", "slurm", "--site", str(site), "--tasks", "8", "--partition", "cpu", "--time", "01:00:00"]
    args = build_parser().parse_args(argv)
    command = rerun_command(args)
    assert shlex.split(command)[0] == "midtrain"
    again = build_parser().parse_args(shlex.split(command)[1:])
    assert {k: v for k, v in vars(again).items() if k != "_run"} == {k: v for k, v in vars(args).items() if k != "_run"}
    # as prep.json records it (a note, never part of the output's identity): pack's refusal names it whole
    prep = write_prep(tmp_path / "pulls", [commit_doc(i, random.Random(5)) for i in range(2)])
    (prep / "prep.json").write_text(
        json.dumps({"source": "pulls", "inputs": [str(inputs)], "tasks": 8, "notes": {"command": command}})
    )
    capsys.readouterr()
    assert main(pack_argv([prep], tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert f"(`{command}`)" in err and "--executor slurm --tasks 8 --site" in err, err


@pytest.mark.parametrize("damage", ["empty", "missing", "other_task"])
def test_a_shard_that_disagrees_with_the_manifest_stops_the_reader(packed, tmp_path, damage):
    _, ref = packed
    out = tmp_path / "shards"
    shutil.copytree(ref, out)
    manifest = json.loads((out / "manifest.json").read_text())
    counts = [t["sequences"] for t in manifest["splits"]["train"]["tasks"]]
    assert len(PackedDataset(out)) == manifest["sequences"] and all(counts), counts
    shard = out / "train" / "00000.bin"
    if damage == "empty":
        shard.write_bytes(b"")  # today: skipped silently, training runs on the other task's sequences
    elif damage == "missing":
        shard.unlink()
    else:  # task 1's shard in task 0's place (same size class, another count)
        assert counts[0] != counts[1]
        for suffix in (".bin", ".idx", ".pieces.npy", ".docs.txt"):
            shutil.copy(out / "train" / f"00001{suffix}", out / "train" / f"00000{suffix}")
    with pytest.raises((ValueError, FileNotFoundError), match=str(shard).replace(".", r"\.")):
        PackedDataset(out)


@pytest.mark.parametrize("damage", ["truncated_gzip", "empty", "cut_last_line"])
def test_a_damaged_document_file_is_named_in_one_line(tmp_path, capsys, damage):
    import gzip

    rng = random.Random(5)
    prep = write_prep(tmp_path / "commits", [commit_doc(i, rng) for i in range(10)], files=2)
    bad = prep / "documents" / "00001.jsonl.gz"
    data = bad.read_bytes()
    if damage == "truncated_gzip":  # a copy that broke off
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "empty":  # today: "cannot mmap an empty file" deep in the pack stage
        bad.write_bytes(b"")
    else:  # a complete gzip stream whose last record lost its end
        bad.write_bytes(gzip.compress(gzip.decompress(data)[:-20]))
    capsys.readouterr()
    assert main(pack_argv([prep], tmp_path / "out")) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"midtrain pack: {bad}: "), err  # today: 175 lines
