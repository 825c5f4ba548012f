"""One "finished and still valid?" for every stage (midtrain/formats/stamp.py): a result stands only for the
content and settings it was made from (a run directory that has trained further is scored again), the newest
complete checkpoint is found one way for every reader, and stamps of an older midtrain are still read."""

from __future__ import annotations

import functools
import hashlib
import json

import pytest

from midtrain.formats.checkpoints import CheckpointError, checkpoint_problem, latest_checkpoint, sha256_files
from midtrain.formats.outputs import COMPLETE, REDO, REUSE, decide
from midtrain.formats.rundir import MARKER, checkpoint_name, run_dir_of
from midtrain.formats.stamp import content_id, output_stamp, stale_fields, stamp


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
    want = stamp(run, {"max_sequences": 4})
    assert want["notes"]["scored_checkpoint"].endswith("iter_0000010")
    record = {"stamp": want, "state": COMPLETE}

    def action(now):
        return decide("proxy", record, now, tmp_path).action

    assert action(stamp(run, {"max_sequences": 4})) == REUSE  # same content, same settings
    assert action(stamp(run, {"max_sequences": 8})) == REDO  # other settings
    _checkpoint(run, 12, b"weights at step 12")  # the same path now names iter_12
    assert action(stamp(run, {"max_sequences": 4})) == REDO


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
    """prep.json keeps its settings at the top level (its readers expect them there); one without output.json
    (an older midtrain's) stands in for the ledger record, and one written before input identities were
    recorded is compared on its settings only."""
    from midtrain.config import ConfigError
    from midtrain.formats.outputs import RESUME
    from midtrain.sources.prep import build_run

    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.jsonl").write_text("{}\n")
    run = build_run("pulls", [str(inputs)], tmp_path / "out")
    want = run.stamp()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "prep.json").write_text(json.dumps(want["config"]))  # no input_identity
    with run.claim(overwrite=False, hold=False) as c:  # the decision alone: no lease, no record
        assert c.action == RESUME
    (inputs / "b.jsonl").write_text("{}\n")
    with run.claim(overwrite=False, hold=False) as c:
        assert c.action == RESUME  # still the settings alone
    (tmp_path / "out" / "prep.json").write_text(json.dumps({**want["config"], "input_identity": want["inputs"]}))
    with pytest.raises(ConfigError, match=r"inputs changed .*2 files, was 1"), run.claim(overwrite=False):
        pass
    (tmp_path / "out" / "prep.json").write_text(json.dumps({**want["config"], "tasks": 3}))
    with pytest.raises(ConfigError, match=r"other settings \(tasks differ\)"), run.claim(overwrite=False):
        pass
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["prep.json"]  # deciding changed nothing


# -- a training that already ran (the demo, sweeps and the probe skip it) -----------------------------------------
def _trained(run_dir, cfg, step: int):
    """RUN_DIR as the trainer leaves it after STEP steps of CFG: config.yaml (the trainer's writer), run_info.json's
    content ids of the inputs (input_ids: what the trainer's run_inputs records for a fresh run) and a checkpoint."""
    from midtrain.train.run_stamp import input_ids

    run_dir.mkdir(parents=True, exist_ok=True)
    cfg.replace(run_dir=str(run_dir)).save_yaml(run_dir / "config.yaml")
    if not (run_dir / "checkpoints").is_dir():
        (run_dir / "run_info.json").write_text(json.dumps({"inputs": input_ids(cfg)}))
    return _checkpoint(run_dir, step, b"weights")


def _packed(shards, documents: str) -> None:
    """A pack output's manifest as midtrain pack writes it: its stamp names the documents' fingerprint."""
    shards.mkdir(parents=True, exist_ok=True)
    pack = output_stamp("pack", {"tokenizer": "k", "docs": documents}, {"seq_length": 64})
    (shards / "manifest.json").write_text(json.dumps({"seq_length": 64, "stamp": pack}))


def _tiny(run_dir, *overrides: str):
    from midtrain.train.config import TrainConfig

    return (
        TrainConfig()
        .apply_overrides([f"run_dir={run_dir}", "optim.train_steps=4", "optim.warmup_steps=1", *overrides])
        .validate()
    )


def test_a_training_is_finished_only_for_the_settings_it_ran_with(tmp_path):
    from midtrain.formats.stamp import reached_step, run_changes, training_stamp
    from midtrain.train.run_stamp import recorded_stamp, want_stamp

    run = tmp_path / "run"
    cfg = _tiny(run)
    want = want_stamp(cfg)
    assert want["made"] == "training run" and want["config"]["optim.lr"] == cfg.optim.lr
    assert "run_dir" in want["notes"] and "log.interval" in want["notes"] and "optim.lr" not in want["notes"]
    assert run_changes(run, want, None) == [] and not reached_step(run, 4, want, None)  # nothing there yet
    _trained(run, cfg, 4)
    assert run_changes(run, want, recorded_stamp(run)) == [] and reached_step(run, 4, want, recorded_stamp(run))
    # where it lies, what it reports, when it saves, how it is laid over devices: the same training
    same = _tiny(tmp_path / "moved", "log.interval=7", "checkpoint.keep_last=5", "parallel.recompute=full", "name=x")
    assert run_changes(run, want_stamp(same), recorded_stamp(run)) == []
    other = want_stamp(_tiny(run, "optim.lr=1e-2", "data.path=/elsewhere"))
    assert run_changes(run, other, recorded_stamp(run)) == [
        "config.data.path: recorded '.demo/shards', now '/elsewhere'",
        "config.optim.lr: recorded 0.0003, now 0.01",
    ]
    assert not reached_step(run, 4, other, recorded_stamp(run)) and reached_step(run, 4)  # the step alone still reads 4
    (run / "config.yaml").write_text("model:\n  num_layers: 2\n")  # cut short: settings unknown
    assert recorded_stamp(run) is None and run_changes(run, want, None)[0].startswith("config.yaml: missing or cut")
    assert training_stamp({"optim": {"lr": 1}})["config"] == {"optim.lr": 1}


def test_the_demo_and_the_probe_train_again_from_scratch_what_another_training_left(tmp_path, caplog):
    """reuse_or_clear (the demo's train stage, the probe's run/): reuse the same finished training, leave an
    unfinished one of the same settings to resume, remove one of other settings naming what differs."""
    import logging

    from midtrain.train.run_stamp import reuse_or_clear

    run = tmp_path / "run"
    cfg = _tiny(run)
    assert reuse_or_clear(run, cfg, "demo train") is False and not run.exists()  # nothing to reuse
    _trained(run, cfg, 2)
    assert reuse_or_clear(run, cfg, "demo train") is False and run.exists()  # unfinished, same settings: resumed
    _checkpoint(run, 4, b"last")
    assert reuse_or_clear(run, cfg, "demo train") is True
    with caplog.at_level(logging.WARNING, "midtrain.train.run_stamp"):
        assert reuse_or_clear(run, _tiny(run, "optim.clip_grad=0.5"), "demo train") is False
    assert not run.exists()  # the old checkpoints would otherwise be resumed under the new settings
    assert "demo train: " in caplog.text and "config.optim.clip_grad: recorded 1.0, now 0.5" in caplog.text


def test_the_probe_reads_the_records_of_an_older_midtrain(tmp_path):
    """A probe output an older midtrain left (probe_run.json, its fields flat in older still; no output.json)
    is decided by the ledger as the record it stands for: reused when it stands and finished, resumed when it
    stopped early, refused naming the field when it measured something else."""
    from midtrain.formats.outputs import RESUME, OutputRefused
    from midtrain.sft.run_stamp import older_record, probe_stamp

    flat = {
        "from": "runs/base",
        "start_checkpoint": "runs/base/checkpoints/iter_0000000",
        "start_id": "a" * 24,
        "probe_sha": "p1",
        "data_sha": "d1-s1",
        "data_content": ["c1"],
        "tokenizer_content": None,
    }
    want = probe_stamp(flat)
    assert want["inputs"] == {"start": "a" * 24, "traces": ["c1"], "tokenizer": None}
    assert want["notes"] == {"start_checkpoint": flat["start_checkpoint"]}  # a note: its content is the input
    assert older_record(tmp_path) is None
    (tmp_path / "probe_run.json").write_text(json.dumps(flat))
    (tmp_path / "sft_result.json").write_text(json.dumps({"recipe": "p", **flat, "exit_code": 0}))
    assert decide("sft", older_record(tmp_path), want, tmp_path).action == REUSE  # an older midtrain's stands
    (tmp_path / "sft_result.json").write_text(json.dumps({**flat, "exit_code": 75}))
    assert decide("sft", older_record(tmp_path), want, tmp_path).action == RESUME
    (tmp_path / "probe_run.json").write_text(json.dumps({**flat, "probe_sha": "p0"}))
    with pytest.raises(OutputRefused, match="config.probe_sha: recorded 'p0', now 'p1'"):
        decide("sft", older_record(tmp_path), want, tmp_path)
    older = {k: v for k, v in flat.items() if k != "data_content"}  # before the traces' content was recorded
    (tmp_path / "probe_run.json").write_text(json.dumps(older))
    with pytest.raises(OutputRefused, match=r"inputs.traces: recorded None, now \['c1'\]"):
        decide("sft", older_record(tmp_path), want, tmp_path)


def test_a_training_on_other_content_at_the_same_paths_is_another_training(tmp_path, caplog):
    """run_info.json records the content ids of the shards and of init_from's checkpoint: shards packed again in
    place, or the checkpoint init_from names replaced at its path, are another training (inputs.data,
    inputs.init_from), and a run_info.json that records none (an older midtrain) is never taken as the same."""
    import logging
    import shutil

    from midtrain.formats.stamp import reached_step, run_changes, shards_id
    from midtrain.train.run_stamp import recorded_stamp, reuse_or_clear, want_stamp

    run, shards, start = tmp_path / "run", tmp_path / "shards", tmp_path / "start"
    _packed(shards, "docs-1")
    _checkpoint(start, 2, b"start weights")
    cfg = _tiny(run, f"data.path={shards}", f"init_from={start}")
    _trained(run, cfg, 4)
    assert reached_step(run, 4, want_stamp(cfg), recorded_stamp(run))
    _packed(shards, "docs-2")  # the same path, other documents packed
    assert [c.split(":")[0] for c in run_changes(run, want_stamp(cfg), recorded_stamp(run))] == ["inputs.data"]
    with caplog.at_level(logging.WARNING, "midtrain.train.run_stamp"):
        assert reuse_or_clear(run, cfg, "demo train") is False and not run.exists()
    assert "holds another training (inputs.data: recorded 'pack:" in caplog.text

    _trained(run, cfg, 4)
    shutil.rmtree(start / "checkpoints")
    _checkpoint(start, 2, b"other weights")  # init_from's checkpoint replaced in place
    changes = run_changes(run, want_stamp(cfg), recorded_stamp(run))
    assert [c.split(":")[0] for c in changes] == ["inputs.init_from"] and not reached_step(run, 4, want_stamp(cfg))

    (run / "run_info.json").write_text(json.dumps({"name": "x"}))  # written before inputs were recorded
    caplog.clear()
    with caplog.at_level(logging.INFO, "midtrain.formats.stamp"):
        assert not reached_step(run, 4, want_stamp(cfg), recorded_stamp(run))
    assert "inputs.data: " in caplog.text and "records no content id of it" in caplog.text
    assert "inputs.init_from: " in caplog.text and "not reused" in caplog.text

    bare = tmp_path / "bare"  # shards whose manifest has no stamp: their listing stands for them
    bare.mkdir()
    (bare / "manifest.json").write_text("{}")
    (bare / "train.bin").write_bytes(b"12")
    before = shards_id(bare)
    assert shards_id(bare) == before
    (bare / "train.bin").write_bytes(b"345")
    assert shards_id(bare) != before and shards_id(tmp_path / "none") == "(not found)"
