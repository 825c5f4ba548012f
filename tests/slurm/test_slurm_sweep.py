"""A two-variant sweep on the real single-node cluster via `midtrain sweep --submit`: setup chain, one afterok
chain per variant (pack, training job, probe, proxy evals) and the baseline's, then the ranked report; a
resubmission reuses the finished variants."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from slurm_helpers import REPO, cluster_site, wait_job

sys.path.insert(0, str(REPO / "tests"))  # tiny_sweep (tests/test_sweep.py) and its prep-dir writers

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_two_variant_sweep_runs_as_afterok_chains_and_reports(slurm_cluster, tmp_path):
    from test_sweep import tiny_sweep

    # a batch of 2 sequences, 2 steps of 2 x 512 tokens. One rank per training job: the 2-rank job is
    # tests/slurm/test_slurm_train.py's; here a 1-CPU training leaves the node's other CPU to the other chain
    over = [
        *tiny_sweep(tmp_path),
        "protocol.probe_seeds=[4321]",
        "tokens=2048",
        "train_overrides=[optim.global_batch_size=2, checkpoint.save_interval=1000, log.tensorboard=false]",
    ]
    site = cluster_site(tmp_path, tasks_per_node=1)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "midtrain.cli", "sweep", "sweep_demo", *over, "--submit", "--site", str(site)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    ids = dict(re.findall(r"^(\S+): ([\d >-]+)$", r.stdout, re.M))
    assert set(ids) == {"setup", "no_midtraining", "mix", "no_traces", "report"}, r.stdout
    assert len(ids["mix"].split(" -> ")) == 4  # pack, train, sft, eval_proxy
    report_id = ids["report"].strip()
    info = wait_job(report_id, timeout=1500)
    out = tmp_path / "sweep"
    logs = sorted((out / "slurm" / "logs").glob("*.out"))
    tail = "\n".join(f"== {p.name}\n{p.read_text()[-1500:]}" for p in logs)
    assert info["JobState"] == "COMPLETED", tail
    res = json.loads((out / "report" / "sweep.json").read_text())
    assert {x["variant"] for x in res["ranking"]} == {"mix", "no_traces"} and not res["missing"], tail
    for x in res["ranking"]:
        sft = json.loads((out / x["variant"] / "sft" / "sft_result.json").read_text())
        assert x["value"] == pytest.approx(sft["heldout_loss"])
    # every variant chain's jobs ran in order: each one's log exists and the training job wrote its checkpoint
    assert (out / "mix" / "run" / "checkpoints" / "iter_0000002").is_dir()
    # resubmitting reuses the finished chains: only setup and the report are submitted
    r2 = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "complete, reused: no_midtraining, mix, no_traces" in r2.stdout
    ids2 = dict(re.findall(r"^(\S+): ([\d >-]+)$", r2.stdout, re.M))
    assert set(ids2) == {"setup", "report"}
    assert wait_job(ids2["report"].strip(), timeout=600)["JobState"] == "COMPLETED"
