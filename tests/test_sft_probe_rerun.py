"""A probe output is reused or resumed only for the start checkpoint (path and content) and the settings it
was made with; another start or other settings are refused naming the difference, or rerun with overwrite."""

from __future__ import annotations

import json
import shutil

import pytest
from sft_helpers import probe_cfg, sample_trace_docs, tiny_checkpoint, write_documents

from midtrain.formats.outputs import OutputRefused

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_probe(tmp_path_factory):
    from midtrain.sft.probe import run_probe

    tmp = tmp_path_factory.mktemp("rerun")
    traces = write_documents(tmp / "prep" / "traces", sample_trace_docs())
    base, other = tiny_checkpoint(tmp / "runs" / "base", seed=11), tiny_checkpoint(tmp / "runs" / "other", seed=12)
    cfg = probe_cfg(traces, f"data_dir={tmp / 'sft_data'}")
    res = run_probe(cfg, base, tmp / "probe_base")
    assert res["exit_code"] == 0 and res["heldout_tokens"] > 0
    return tmp, traces, base, other, res


def test_stamp_records_start_and_settings(base_probe):
    tmp, _, base, _, res = base_probe
    stamp = json.loads((tmp / "probe_base" / "output.json").read_text())["stamp"]
    assert stamp["made"] == "sft probe" and stamp["config"]["from"] == str(base)
    assert stamp["notes"]["start_checkpoint"].endswith("iter_0000000")
    assert len(stamp["inputs"]["start"]) == 24 and stamp["config"]["probe_sha"] == res["probe_sha"]
    assert {k: res[k] for k in stamp} == stamp  # the result carries what it measured
    assert (res["from"], res["start_id"]) == (str(base), stamp["inputs"]["start"])  # and the flat fields readers take


def test_copy_run_from_another_start_is_refused_then_overwritten(base_probe):
    from midtrain.sft.probe import run_probe

    tmp, traces, base, other, res = base_probe
    copy = tmp / "probe_copy"
    shutil.copytree(tmp / "probe_base", copy)
    cfg = probe_cfg(traces, f"data_dir={tmp / 'sft_data'}")
    with pytest.raises(OutputRefused, match=r"inputs\.start: recorded .*config\.from: recorded .*base.*, now .*other"):
        run_probe(cfg, other, copy)
    assert json.loads((copy / "sft_result.json").read_text())["heldout_loss"] == res["heldout_loss"]  # untouched
    new = run_probe(cfg, other, copy, overwrite=True)
    assert new["from"] == str(other) and new["heldout_loss"] != res["heldout_loss"]
    assert f"init_from: {other}" in (copy / "run" / "config.yaml").read_text()


@pytest.mark.parametrize(
    "overrides", [["train.optim.lr=1e-2"], ["train.optim.train_steps=3", "train.checkpoint.save_interval=3"]]
)
def test_other_settings_are_refused(base_probe, overrides):
    from midtrain.sft.probe import run_probe

    tmp, traces, base, _, res = base_probe
    cfg = probe_cfg(traces, f"data_dir={tmp / 'sft_data'}", *overrides)
    before = (tmp / "probe_base" / "sft_result.json").read_text()
    with pytest.raises(OutputRefused, match="config.probe_sha"):
        run_probe(cfg, base, tmp / "probe_base")  # not reused, and not resumed from the old run's last step
    assert (tmp / "probe_base" / "sft_result.json").read_text() == before


def test_same_path_other_content_is_refused(base_probe):
    """A start checkpoint rewritten in place (same path, other weights) is another start."""
    from midtrain.sft.probe import run_probe

    tmp, traces, _, _, _ = base_probe
    start = tiny_checkpoint(tmp / "runs" / "moving", seed=21)
    cfg = probe_cfg(traces, f"data_dir={tmp / 'sft_data'}")
    out = tmp / "probe_moving"
    first = run_probe(cfg, start, out)
    assert run_probe(cfg, start, out) == first  # unchanged: reused
    shutil.rmtree(start)
    tiny_checkpoint(start, seed=22)
    with pytest.raises(OutputRefused, match="inputs.start"):
        run_probe(cfg, start, out)


def test_unstamped_probe_dir_is_refused(base_probe):
    from midtrain.sft.probe import run_probe

    tmp, traces, base, _, _ = base_probe
    legacy = tmp / "probe_legacy"
    shutil.copytree(tmp / "probe_base", legacy)
    (legacy / "output.json").unlink()
    with pytest.raises(OutputRefused, match="no output.json stamp .*what its files were made from is unknown"):
        run_probe(probe_cfg(traces, f"data_dir={tmp / 'sft_data'}"), base, legacy)


def test_a_training_of_other_settings_under_a_matching_stamp_is_trained_again(base_probe, caplog):
    """(Before the test that rebuilds the shared data dir with other settings.) output.json matches, but run/ holds a training of other settings (an older midtrain's default, say): it
    is trained again from scratch, never taken as finished at the same last step, the field logged."""
    import logging

    from midtrain.sft.probe import run_probe
    from midtrain.train.config import read_run_config

    tmp, traces, base, _, res = base_probe
    out = tmp / "probe_retrain"
    shutil.copytree(tmp / "probe_base", out)
    (out / "sft_result.json").unlink()
    run_cfg = read_run_config(out / "run" / "config.yaml")
    run_cfg.apply_overrides(["optim.clip_grad=0.25"]).save_yaml(out / "run" / "config.yaml")
    with caplog.at_level(logging.INFO):
        new = run_probe(probe_cfg(traces, f"data_dir={tmp / 'sft_data'}"), base, out)
    assert "config.optim.clip_grad: recorded 0.25, now 1.0" in caplog.text and "not retrained" not in caplog.text
    assert new["heldout_loss"] == pytest.approx(res["heldout_loss"])  # the same training again: the same result
    assert read_run_config(out / "run" / "config.yaml").optim.clip_grad == 1.0


def test_changed_data_settings_refuse_the_shared_data_dir_unless_overwrite(base_probe):
    from midtrain.sft.probe import run_probe

    tmp, traces, base, _, _ = base_probe
    cfg = probe_cfg(traces, f"data_dir={tmp / 'sft_data'}", "pad_multiple=2")
    with pytest.raises(OutputRefused, match="other settings"):
        run_probe(cfg, base, tmp / "probe_pad2")
    res = run_probe(cfg, base, tmp / "probe_pad2", overwrite=True)
    assert res["exit_code"] == 0
    assert json.loads((tmp / "sft_data" / "sft_data.json").read_text())["data_hash"] == res["data_sha"]
    assert res["data_sha"].startswith(cfg.data_hash())  # the settings, then the held-out split they use


def test_a_second_probe_into_an_output_in_use_is_refused_naming_the_first(base_probe):
    """A probe holds its output's lease: another probe (a resubmitted job) into it stops before any work."""
    import subprocess
    import sys
    import time

    tmp, traces, base, _, _ = base_probe
    out, ready = tmp / "probe_held", tmp / "held"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from midtrain.formats.outputs import Lease; "
            "Lease(sys.argv[1], 'sft probe').acquire(); Path(sys.argv[2]).write_text('x'); time.sleep(600)",
            str(out),
            str(ready),
        ]
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        from midtrain.sft.probe import run_probe

        with pytest.raises(OutputRefused, match=f"is in use by `sft probe` \\(pid {holder.pid} on "):
            run_probe(probe_cfg(traces, f"data_dir={tmp / 'sft_data'}"), base, out)
        assert not (out / "output.json").exists()
    finally:
        holder.kill()
        holder.wait()
