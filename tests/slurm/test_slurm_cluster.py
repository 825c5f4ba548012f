"""On the real single-node cluster: afterok chains run in order (and a failure cancels the rest), and a
datatrove prep job array configured from the site config writes its documents and resumes on relaunch."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_helpers import QUEUE_TIMEOUT_S, cluster_site, job_state, wait_for, wait_job

from midtrain.launch.prep import slurm_executor
from midtrain.launch.protocol_job import StepJob, build_chains, submit_jobs
from midtrain.launch.site import load_site
from midtrain.runner import StageChain, unfinished_tasks

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _ts(info: dict[str, str], key: str) -> float:
    return time.mktime(time.strptime(info[key], "%Y-%m-%dT%H:%M:%S"))


def test_chain_runs_steps_in_order_then_final_after_all(slurm_cluster, tmp_path):
    site = load_site(cluster_site(tmp_path))
    out = tmp_path / "out"
    steps = {
        "ok": [
            ("first", ["config", "demo_tiny", "optim.train_steps=11", "--yaml-only"]),
            ("second", ["recipes", "--kind", "protocol"]),
        ],
        # a failing first link must cancel the rest of its chain, not leave it pending forever
        "broken": [("first", ["config", "no_such_recipe"]), ("second", ["recipes"])],
    }
    jobs = submit_jobs(build_chains(site, out / "slurm", steps, ("report", ["recipes", "--kind", "train"]), "mt-t"))
    ok, broken = jobs.job_ids["ok"], jobs.job_ids["broken"]
    final = wait_job(jobs.final_id, timeout=600)
    infos = {j: wait_job(j, timeout=30) for j in ok + broken}

    a, b = infos[ok[0]], infos[ok[1]]
    assert a["JobState"] == "COMPLETED" and b["JobState"] == "COMPLETED", (a, b)
    assert b["Dependency"] == "(null)" or ok[0] in b["Dependency"]
    assert _ts(b, "StartTime") >= _ts(a, "EndTime"), "second step started before the first ended"
    step_a, step_b = jobs.chains["ok"]
    assert isinstance(step_a, StepJob) and isinstance(step_b, StepJob)
    log_a = Path(step_a.log_path.replace("%j", ok[0])).read_text()
    log_b = Path(step_b.log_path.replace("%j", ok[1])).read_text()
    assert "train_steps: 11" in log_a and "protocol_demo" in log_b

    assert infos[broken[0]]["JobState"] == "FAILED"
    assert infos[broken[1]]["JobState"] == "CANCELLED", infos[broken[1]]
    # the final step waits for every chain (afterany) and runs even though one chain failed
    assert final["JobState"] == "COMPLETED"
    assert _ts(final, "StartTime") >= max(_ts(infos[j], "EndTime") for j in (ok[1], broken[0]))


def _wait_queue_empty(job_ids: list[str], timeout: float) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids)], capture_output=True, text=True).stdout
        if not out.strip():
            return
        time.sleep(1)
    pytest.fail(f"jobs {job_ids} still queued after {timeout:.0f}s")


def test_prep_job_array_writes_documents_and_resumes(slurm_cluster, tmp_path):
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    raw = tmp_path / "raw"
    raw.mkdir()
    for f in range(2):
        rows = [
            {
                "text": f"def f{f}_{i}():\n    return {i}\n",
                "id": f"doc-{f}-{i}",
                "metadata": {"source": "repo", "repo": "octo/demo", "license": "MIT"},
            }
            for i in range(5)
        ]
        (raw / f"part{f}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    site = load_site(cluster_site(tmp_path))
    logs, docs = tmp_path / "logs", tmp_path / "documents"

    def executor():
        return slurm_executor(
            [JsonlReader(str(raw)), JsonlWriter(str(docs))],
            site,
            job_name="mt-prep-test",
            logging_dir=str(logs),
            slurm_logs_dir=str(tmp_path / "slurm_logs"),
        )

    ex = executor()
    ex.run()
    assert ex.job_id and ex.job_id != -1
    script = (logs / "launch_script.slurm").read_text()
    assert "#SBATCH --array=0-1" in script and "#SBATCH --mem-per-cpu=1G" in script
    assert "source " in script and "/bin/activate" in script
    array = str(ex.job_id)
    _wait_queue_empty([array], timeout=QUEUE_TIMEOUT_S + 600)  # queued behind other jobs, then run
    # datatrove's stats-merge job runs after the array
    wait_for((logs / "stats.json").exists, 300, "datatrove's stats merge after the array")
    assert sorted(p.name for p in (logs / "completions").iterdir()) == ["00000", "00001"]
    written = []
    for path in sorted(docs.glob("*.jsonl.gz")):
        with gzip.open(path, "rt") as fh:
            written += [json.loads(line) for line in fh]
    assert sorted(d["id"] for d in written) == sorted(f"doc-{f}-{i}" for f in range(2) for i in range(5))
    assert all(d["metadata"]["source"] == "repo" for d in written)

    # relaunch after everything finished: nothing to submit
    again = executor()
    again.run()
    assert again.job_id == -1
    # one task "lost" (its marker gone): a relaunch resubmits only that task
    (logs / "completions" / "00001").unlink()
    (docs / "00001.jsonl.gz").unlink()
    third = executor()
    third.run()
    assert third.job_id not in (None, -1)
    assert json.loads((logs / "ranks_to_run.json").read_text()) == [1]
    _wait_queue_empty([str(third.job_id)], timeout=QUEUE_TIMEOUT_S + 600)
    wait_for((logs / "completions" / "00001").exists, 300, "the resubmitted task's completion marker")
    assert (logs / "completions" / "00001").exists() and (docs / "00001.jsonl.gz").exists()
    info = job_state(str(third.job_id))
    assert info == {} or info.get("JobState") in ("COMPLETED", None)


def _records(job_id: str) -> list[dict[str, str]]:
    """Every record ``scontrol show job`` holds for JOB_ID (one per array element once they have run)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    return [dict(t.split("=", 1) for t in line.split() if "=" in t) for line in out.splitlines() if line.strip()]


def test_a_failed_prep_array_element_cancels_the_next_stage_and_is_named(slurm_cluster, tmp_path, caplog):
    """On the cluster's default DependencyParameters (the test cluster does not set kill_invalid_depend), the
    stage after a failed element is cancelled by the job's own --kill-on-invalid-dep, not left pending. The
    failed element is named with its log (for `midtrain pack`'s refusal and the rerun), and the rerun says
    which new element runs which unfinished task (it was resubmitted silently under new array numbers)."""
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    raw = tmp_path / "raw"
    raw.mkdir()
    with gzip.open(raw / "part0.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"text": "x = 1\n", "id": "doc-0"}) + "\n")
    (raw / "part1.jsonl.gz").write_bytes(b"not gzip")  # the reader of the task that gets it raises
    site = load_site(cluster_site(tmp_path))

    def chain() -> StageChain:
        c = StageChain("slurm", site, label="prep t")
        for name, src, dst in (("first", raw, tmp_path / "docs"), ("second", tmp_path / "docs", tmp_path / "docs2")):
            c.add(
                name,
                [JsonlReader(str(src)), JsonlWriter(str(dst))],
                2,
                str(tmp_path / "logs" / name),
                job_name="mt-prep-fail",
                slurm_logs_dir=str(tmp_path / "slurm_logs" / name),
            )
        return c

    submitted = chain()
    submitted.run()  # submits the first stage, then the second afterok on it
    first, second = (s.executor for s in submitted.stages)
    array, after = str(first.job_id), str(second.job_id)
    try:
        _wait_queue_empty([array], timeout=QUEUE_TIMEOUT_S + 600)
        records = _records(array)
        assert sorted(r["JobState"] for r in records) == ["COMPLETED", "FAILED"], records
        # Slurm resolves the dependency when the array ends: CANCELLED at once, never run
        wait_for(lambda: job_state(after).get("JobState") != "PENDING", 120, f"stage 2 (job {after}) left PENDING")
        info = job_state(after)
        assert info["JobState"] == "CANCELLED", info
        assert not list((tmp_path / "slurm_logs" / "second").glob(f"{after}_*")), "stage 2 ran"
        # and datatrove's stats merge of each stage (afterok too) is not left behind either
        wait_for(
            lambda: not subprocess.run(["squeue", "-h", "-n", "mt-prep-fail"], capture_output=True, text=True).stdout,
            120,
            "the stats-merge jobs of both stages cancelled",
        )
        failed = next(r["ArrayTaskId"] for r in records if r["JobState"] == "FAILED")
        [task] = unfinished_tasks(tmp_path / "logs" / "first")
        assert task.element == f"{array}_{failed}" and task.log == str(
            tmp_path / "slurm_logs" / "first" / f"{array}_{failed}.out"
        )
        assert "Traceback" in Path(task.log).read_text()  # the log named is the one that says why
        never = unfinished_tasks(tmp_path / "logs" / "second")
        assert [(t.task, t.element) for t in never] == [(0, None), (1, None)]
        assert "never started" in never[0].describe()
        with caplog.at_level("WARNING", logger="midtrain.runner"):
            chain().run()
        text = caplog.text
        assert f"stage first: 1 task(s) of the last submission did not finish: {task.describe()}" in text, text
        assert "stage first: submitted again as job" in text and f"task {task.task} -> element 0;" in text, text
        assert "stage second: 2 task(s) of the last submission did not finish" in text, text
    finally:
        subprocess.run(["scancel", "-n", "mt-prep-fail"], capture_output=True)


def _prep(out: Path) -> subprocess.CompletedProcess:
    from slurm_helpers import REPO

    site = out.parent / "site.yaml"
    if not site.exists():
        cluster_site(out.parent)  # one node: its /tmp is every job's (node_local_paths: [])

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "midtrain.cli",
            "prep",
            "buildlogs",
            # dedup adds five more job arrays; the Slurm wiring is the same, the test budget is not
            "dedup.enabled=false",
            "--input",
            str(REPO / "data_prep" / "samples" / "buildlogs"),
            "--output",
            str(out),
            "--executor",
            "slurm",
            "--tasks",
            "2",
            "--partition",
            "debug",
            "--time",
            "00:10:00",
            "--mem-per-cpu-gb",
            "1",
            "--site",
            str(site),
        ],
        capture_output=True,
        text=True,
        cwd=out.parent,
    )


def test_midtrain_prep_executor_slurm_writes_documents_and_relaunch_resumes(slurm_cluster, tmp_path):
    out = tmp_path / "prep"
    r = _prep(out)
    assert r.returncode == 0, r.stderr[-3000:]
    stats_path = out / "stats.json"
    wait_for(
        lambda: stats_path.exists() and json.loads(stats_path.read_text()).get("complete"),
        QUEUE_TIMEOUT_S + 900,
        f"prep on Slurm finished (stats.json complete) in {out}",
    )
    stats = json.loads(stats_path.read_text())
    docs = []
    for path in sorted((out / "documents").glob("*.jsonl.gz")):
        with gzip.open(path, "rt") as fh:
            docs += [json.loads(line) for line in fh]
    assert len(docs) == stats["documents_out"] > 0
    assert all(d["metadata"]["source"] == "buildlog" for d in docs)
    # every stage ran as a job array of 2 tasks
    assert "#SBATCH --array=0-1" in (out / "logs" / "source" / "launch_script.slurm").read_text()
    # relaunching the same command finds every completion marker and submits nothing (stats.json stays)
    before = stats_path.stat().st_mtime_ns
    r = _prep(out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Skipping launch" in r.stderr and "Launching Slurm job" not in r.stderr, r.stderr[-3000:]
    assert stats_path.stat().st_mtime_ns == before


def test_submit_protocol_cli_submits_one_afterok_chain_per_checkpoint(slurm_cluster, tmp_path):
    from slurm_helpers import REPO

    site = cluster_site(tmp_path)
    out = tmp_path / "protocol"
    # checkpoints that do not exist: each chain's SFT step fails, its evals are cancelled, the report still runs
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "midtrain.cli",
            "submit",
            "protocol",
            "protocol_demo",
            f"output={out}",
            f"checkpoints={{a: {tmp_path}/none_a, b: {tmp_path}/none_b}}",
            "baseline=a",
            "--site",
            str(site),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    chains = {m[0]: m[1:] for m in re.findall(r"^(\w+): sft (\d+) -> eval_proxy (\d+)", r.stdout, re.M)}
    assert set(chains) == {"a", "b"}, r.stdout
    m = re.search(r"^report: job (\d+)", r.stdout, re.M)
    assert m, r.stdout
    report = m.group(1)
    for sft, ev in chains.values():  # afterok inside a chain (unless already resolved and cancelled)
        info = job_state(ev)
        assert f"afterok:{sft}" in info.get("Dependency", "") or info.get("JobState") == "CANCELLED", info
    info = job_state(report)  # afterany on every chain's last job
    assert info.get("JobState") != "PENDING" or all(f"afterany:{ev}" in info["Dependency"] for _, ev in chains.values())
    final = wait_job(report, timeout=600)
    for sft, ev in chains.values():
        assert wait_job(sft, 30)["JobState"] == "FAILED"
        assert wait_job(ev, 30)["JobState"] == "CANCELLED"
    assert final["JobState"] in ("COMPLETED", "FAILED")  # ran after every chain ended (afterany)
    assert (out / "slurm" / "a-sft.sbatch").is_file() and (out / "slurm" / "all-report.sbatch").is_file()
