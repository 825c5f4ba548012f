"""Rendered job scripts run with stub `srun`/`scontrol`/`sbatch` (no cluster): hostile values stay words,
the requeue is decided on the ranks' status records, one log per restart, the wait loop's race, and the
placement rules (exclusive GPU nodes, CPUs per node, node-local paths, container mounts, ports)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from midtrain.commands.submit import train_job
from midtrain.config import ConfigError
from midtrain.launch.protocol_job import StepJob, build_chains, write_jobs
from midtrain.launch.shell import LaunchError
from midtrain.launch.site import SiteConfig

GBS = "optim.global_batch_size=64"
HOSTILE = "$(touch pwned) `touch pwned`"

SRUN = r"""#!/bin/bash
# stub srun: records its words (calls/N, one per line); as the ranks' step it writes the exit records of
# $STUB_EXITS ("RANK:CODE ...") and exits $STUB_RC
n=$(ls "$STUB_DIR/calls" | wc -l)
printf '%s\n' "$@" > "$STUB_DIR/calls/$n"
prev=""; status=""
for a in "$@"; do [ "$prev" = midtrain.launch.rank ] && status="$a"; prev="$a"; done
if [ -n "$status" ]; then
  for spec in ${STUB_EXITS:-}; do echo "${spec#*:}" > "$status/exit.${spec%%:*}"; done
  if [ -n "${STUB_SIGNAL_PARENT:-}" ]; then  # USR1 to the batch shell, then end while its trap runs
    echo $$ > "$STUB_DIR/rank.pid"
    kill -USR1 "$PPID"
    until [ -e "$STUB_DIR/calls/1" ]; do sleep 0.01; done
  fi
  exit "${STUB_RC:-0}"
fi
if [ -f "$STUB_DIR/rank.pid" ]; then  # the forwarder: return only once the ranks' srun has ended
  while kill -0 "$(cat "$STUB_DIR/rank.pid")" 2>/dev/null; do sleep 0.01; done
fi
"""
SCONTROL = r"""#!/bin/bash
case "$1 $2" in
  "show job") touch "$STUB_DIR/asked_state"; echo "JobId=$4 JobState=${STUB_JOB_STATE:-RUNNING} Restarts=0" ;;
  "show node") echo "NodeName=$4 Arch=x86_64 NodeAddr=${STUB_NODE_ADDR:-$4} NodeHostName=$4 Version=22.05.8" ;;
  show*) echo n1; echo n2 ;;
  requeue*) echo "$2" >> "$STUB_DIR/requeued" ;;
esac
"""
SCANCEL = r"""#!/bin/bash
echo "$@" >> "$STUB_DIR/scancelled"
"""


def _site(tmp_path: Path, **changes) -> SiteConfig:
    base = {
        "name": "t",
        "workdir": str(tmp_path),
        "node_local_paths": [],
        "train": {"nodes": 2, "gpus_per_node": 8, "cpus_per_task": 12, "mem": "0", "time": "04:00:00"},
    }
    return SiteConfig.from_dict({**base, **changes}).validate()


def _stubs(tmp_path: Path) -> Path:
    stub = tmp_path / "stub"
    (stub / "bin").mkdir(parents=True)
    (stub / "calls").mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL), ("scancel", SCANCEL)):
        (stub / "bin" / name).write_text(text)
        (stub / "bin" / name).chmod(0o755)
    return stub


def _run(script: Path, stub: Path, **env: str) -> subprocess.CompletedProcess:
    full = {
        "PATH": f"{stub / 'bin'}:{os.environ['PATH']}",
        "HOME": str(stub),
        "STUB_DIR": str(stub),
        "SLURM_JOB_ID": "123",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_CPUS_PER_TASK": "12",
        **env,
    }
    return subprocess.run(["bash", str(script)], env=full, capture_output=True, text=True, cwd=stub, timeout=120)


def _calls(stub: Path) -> list[list[str]]:
    files = sorted((stub / "calls").iterdir(), key=lambda p: int(p.name))
    return [p.read_text().splitlines() for p in files]


def _launch(stub: Path) -> list[str]:
    return next(c for c in _calls(stub) if "midtrain.launch.rank" in c)


def _train(tmp_path: Path, site: SiteConfig, *over: str):
    job = train_job("demo_tiny", [GBS, f"run_dir={tmp_path / 'run'}", *over], site)
    job.write()
    return job


@pytest.mark.parametrize("python", ["container", "venv"])
def test_hostile_site_values_stay_single_words_when_the_script_runs(tmp_path, python):
    workdir = tmp_path / f"w {HOSTILE}"
    workdir.mkdir()
    extra: dict = {"workdir": str(workdir), "env": {"X": HOSTILE}}
    if python == "container":
        extra.update(container_image=f"img {HOSTILE}", container_mounts=[f"{tmp_path}/d:{tmp_path}/d"])
    else:
        venv = tmp_path / f"v {HOSTILE}"
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "activate").write_text("export ACTIVATED=1\n")
        extra["venv"] = str(venv)
    job = _train(tmp_path, _site(tmp_path, **extra))
    stub = _stubs(tmp_path)
    r = _run(job.script_path, stub)
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.rglob("pwned")), "a value was executed by the shell"
    words = _launch(stub)
    assert words[-6:] == [
        "-m",
        "midtrain.launch.rank",
        str(job.slurm_dir / "status" / "123.0"),
        "midtrain.cli",
        "train",
        str(job.slurm_dir / "config.yaml"),
    ]
    if python == "container":
        assert f"--container-image=img {HOSTILE}" in words
        assert f"--container-workdir={workdir}" in words
        mounts = next(w for w in words if w.startswith("--container-mounts=")).split("=", 1)[1].split(",")
        assert mounts == [
            f"{tmp_path}/d:{tmp_path}/d",
            f"{workdir}:{workdir}",
            f"{job.run_dir}:{job.run_dir}",
        ]  # the workdir and run dir are mounted
    log = (job.slurm_dir / "logs" / "train-123_0.out").read_text()
    assert "2 nodes x 8 ranks" in log


def test_step_script_runs_with_hostile_workdir_and_argv(tmp_path):
    workdir = tmp_path / f"w {HOSTILE}"
    workdir.mkdir()
    site = _site(tmp_path, workdir=str(workdir), env={"Y": HOSTILE})
    argv = ["eval", "proxy", f"--output={HOSTILE}"]
    jobs = build_chains(site, tmp_path / "p" / "slurm", {"base": [("eval_proxy", argv)]})
    write_jobs(jobs)
    stub = _stubs(tmp_path)
    job = jobs.chains["base"][0]
    assert isinstance(job, StepJob)
    r = _run(job.script_path, stub)
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.rglob("pwned"))
    assert _launch(stub)[-3:] == argv
    assert Path(job.log_path.replace("%j", "123")).is_file()


@pytest.mark.parametrize(
    "exits,srun_rc,restart,usr1,requeued,rc",
    [
        (
            "0:75",
            137,
            "0",
            True,
            True,
            0,
        ),  # rank 0 checkpointed; a slower rank was killed: srun says 137, requeue anyway
        ("0:75 1:75", 75, "0", True, True, 0),
        ("0:75", 137, "0", False, False, 137),  # checkpointed without USR1 (a TERM to the ranks): not requeued here
        ("", 1, "0", False, False, 1),  # a crash: no retries by default, the job fails with srun's code
        ("0:0 1:0", 0, "0", False, False, 0),  # done
        ("0:75", 143, "3", True, False, 143),  # max_requeues (3) reached
        ("0:0 1:3", 143, "0", False, False, 3),  # rank 1 failed (exit 3), srun then killed the rest: the job says 3
    ],
)
def test_requeue_is_decided_on_the_ranks_records_not_srun_exit_code(
    tmp_path, exits, srun_rc, restart, usr1, requeued, rc
):
    job = _train(tmp_path, _site(tmp_path, max_requeues=3))
    stub = _stubs(tmp_path)
    env = {"STUB_SIGNAL_PARENT": "1"} if usr1 else {}
    r = _run(job.script_path, stub, STUB_EXITS=exits, STUB_RC=str(srun_rc), SLURM_RESTART_COUNT=restart, **env)
    assert r.returncode == rc, r.stderr
    assert (stub / "requeued").exists() == requeued
    # one log per start of the job, ranks labelled
    log = (job.slurm_dir / "logs" / f"train-123_{restart}.out").read_text()
    assert f"restart {restart}:" in log
    assert "--label" in _launch(stub) and "--cpus-per-task=12" in _launch(stub)
    assert "--kill-on-bad-exit=1" in _launch(stub)
    if rc == 3:
        assert "rank 1 failed first, with exit 3 (srun's 143" in log, log


@pytest.mark.parametrize("retries_before,srun_rc,requeued", [(0, 1, True), (1, 134, True), (2, 1, False)])
def test_a_crash_is_retried_up_to_max_retries(tmp_path, retries_before, srun_rc, requeued):
    job = _train(tmp_path, _site(tmp_path, max_retries=2))
    stub = _stubs(tmp_path)
    retries = job.slurm_dir / "status" / "123.retries"
    retries.parent.mkdir(parents=True)
    if retries_before:
        retries.write_text(f"{retries_before}\n")
    r = _run(job.script_path, stub, STUB_RC=str(srun_rc), SLURM_RESTART_COUNT=str(retries_before))
    log = (job.slurm_dir / "logs" / f"train-123_{retries_before}.out").read_text()
    assert (stub / "requeued").exists() == requeued, log
    if requeued:
        assert r.returncode == 0 and f"crashed (exit {srun_rc}): retry {retries_before + 1} of max_retries=2" in log
        assert retries.read_text().split() == [str(retries_before + 1)]
    else:
        assert r.returncode == srun_rc and "max_retries=2 retries used" in log, log


@pytest.mark.parametrize("step", [False, True])
def test_the_rendezvous_is_the_first_nodes_slurm_address_not_its_name(tmp_path, step):
    """MASTER_ADDR is the first node's NodeAddr (what Slurm reaches it by), not its name, which need not
    resolve on the nodes."""
    site = _site(tmp_path)
    if step:
        jobs = build_chains(site, tmp_path / "p" / "slurm", {"base": [("sft", ["sft", "x"])]})
        write_jobs(jobs)
        script = jobs.chains["base"][0].script_path
    else:
        script = _train(tmp_path, site).script_path
    stub = _stubs(tmp_path)
    r = _run(script, stub, STUB_NODE_ADDR="10.1.2.3")
    assert r.returncode == 0, r.stderr
    logs = sorted(script.parent.glob("logs/*_0.out"))
    assert logs and "master 10.1.2.3:" in logs[0].read_text(), [p.read_text() for p in logs]


def test_wait_loop_returns_srun_status_when_a_trap_interrupts_the_wait_it_ends_in(tmp_path):
    job = _train(tmp_path, _site(tmp_path))
    stub = _stubs(tmp_path)
    r = _run(job.script_path, stub, STUB_RC="3", STUB_SIGNAL_PARENT="1")
    log = (job.slurm_dir / "logs" / "train-123_0.out").read_text()
    assert "USR1 forwarded to the ranks" in log
    assert r.returncode == 3, log  # srun's code, not the trap's 138
    forwarder = _calls(stub)[1]
    # one forwarding task per node, beside the ranks' step
    assert forwarder[:5] == ["--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=1"]


@pytest.mark.parametrize("state", ["CANCELLED", "RUNNING"])
def test_a_term_to_the_batch_shell_ends_the_ranks_and_never_requeues(tmp_path, state):
    """scancel sends TERM to the batch shell (and every step; the job is CANCELLED by then): even with the
    ranks' checkpoint records (the trainer checkpoints on TERM too), the job is not requeued and the ranks'
    srun is left alone (srun turns a TERM into a kill of its tasks). A TERM to the batch shell only
    (scancel --batch, the job still RUNNING) goes to each rank through the forwarder, and the script cancels
    the job once they have stopped."""
    job = _train(tmp_path, _site(tmp_path, max_retries=2))
    stub = _stubs(tmp_path)
    script = job.script_path.read_text()
    assert "trap terminate TERM" in script
    # the batch shell gets TERM while the ranks run (simulated by the ranks' srun, which is its child); the
    # ranks' srun ends once the forwarder ran, or once the trap has seen that none is due
    (stub / "bin" / "srun").write_text(
        SRUN.replace('kill -USR1 "$PPID"', 'kill -TERM "$PPID"')
        .replace(
            'until [ -e "$STUB_DIR/calls/1" ]; do sleep 0.01; done',
            'until [ -e "$STUB_DIR/calls/1" ] || { [ -e "$STUB_DIR/asked_state" ] && [ "$STUB_JOB_STATE" != RUNNING ]; }; '
            "do sleep 0.01; done",
        )
        .replace("#!/bin/bash\n", "#!/bin/bash\ntrap 'touch $STUB_DIR/term' TERM\n")
    )
    r = _run(job.script_path, stub, STUB_EXITS="0:75 1:75", STUB_RC="0", STUB_SIGNAL_PARENT="1", STUB_JOB_STATE=state)
    log = (job.slurm_dir / "logs" / "train-123_0.out").read_text()
    assert not (stub / "requeued").exists(), log
    assert not (stub / "term").exists(), "the ranks' srun got a TERM (it would kill the ranks)"
    assert r.returncode == 75 and "terminated: not requeueing" in log, log
    if state == "CANCELLED":
        assert len(_calls(stub)) == 1, "a TERM Slurm sent every step too must not run the forwarder"
        assert not (stub / "scancelled").exists(), log
    else:
        assert _calls(stub)[1][-1] == "TERM", _calls(stub)  # the forwarder, with the signal to pass on
        assert "TERM passed on to the ranks" in log, log
        assert (stub / "scancelled").read_text().split() == ["123"], log


EARLY = """import os, pathlib, time
pathlib.Path(os.environ["READY"]).touch()
time.sleep(300)
"""


@pytest.mark.parametrize("sig,code", [("USR1", 75), ("TERM", 143)])
def test_a_signal_before_the_trainers_handler_leaves_a_record(tmp_path, sig, code):
    import signal

    (tmp_path / "early_stub.py").write_text(EARLY)
    status = tmp_path / "status"
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}",
        "READY": str(tmp_path / "ready"),
        "SLURM_PROCID": "3",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "midtrain.launch.rank", str(status), "early_stub"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(1200):  # up to 120 s on a loaded machine; returns as soon as the stub is running
            if (tmp_path / "ready").exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.stderr is not None
        assert (tmp_path / "ready").exists(), proc.stderr.read() if proc.poll() is not None else "stub not started"
        proc.send_signal(getattr(signal, f"SIG{sig}"))
        assert proc.wait(timeout=120) == code
    finally:
        proc.kill()
    assert (status / "early_signal.3").read_text().strip() == f"SIG{sig}"
    assert (status / "exit.3").read_text().strip() == str(code)
    assert f"SIG{sig} before the trainer's handler" in proc.stderr.read()


def test_gpu_steps_get_the_training_environment_and_requeue(tmp_path):
    site = _site(
        tmp_path,
        protocol={
            "default": {"gpus_per_node": 8, "cpus_per_task": 12},
            "report": {"gpus_per_node": 0, "cpus_per_task": 2},
        },
    )
    jobs = build_chains(site, tmp_path / "slurm", {"base": [("sft", ["sft", "x"])]}, ("report", ["report"]))
    assert jobs.final is not None
    sft, report = jobs.chains["base"][0].script, jobs.final.script
    for line in (
        "export CUDA_DEVICE_MAX_CONNECTIONS=1",
        "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@300",
        "#SBATCH --exclusive",
        "--cpus-per-task=12",
    ):
        assert line in sft, line
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in report and "--exclusive" not in report
    assert "#SBATCH --requeue" in report


def test_placement_exclusive_and_cpus_per_node(tmp_path):
    job = train_job("demo_tiny", [GBS, "run_dir=/lustre/r"], _site(tmp_path))
    assert job.script.count("#SBATCH --exclusive") == 1
    job = train_job("demo_tiny", [GBS, "run_dir=/lustre/r"], _site(tmp_path, exclusive=False))
    assert "--exclusive" not in job.script
    cpu = {"nodes": 1, "gpus_per_node": 0, "tasks_per_node": 2, "cpus_per_task": 1}
    assert "--exclusive" not in train_job("demo_tiny", [GBS, "run_dir=/lustre/r"], _site(tmp_path, train=cpu)).script
    # per job: the 1-GPU proxy eval shares its node, a CPU report may ask for a whole one
    site = _site(
        tmp_path,
        protocol={
            "default": {"gpus_per_node": 8, "cpus_per_task": 12},
            "eval_proxy": {"gpus_per_node": 1, "exclusive": False},
            "report": {"gpus_per_node": 0, "exclusive": True},
        },
    )
    jobs = build_chains(site, tmp_path / "x", {"b": [("sft", ["sft"]), ("eval_proxy", ["eval"])]}, ("report", ["r"]))
    sft, proxy = (j.script for j in jobs.chains["b"])
    assert jobs.final is not None
    assert "#SBATCH --exclusive" in sft and "--exclusive" not in proxy and "#SBATCH --exclusive" in jobs.final.script
    jobs = build_chains(_site(tmp_path), tmp_path / "y", {"b": [("sft", ["sft"]), ("eval_proxy", ["eval"])]})
    sft, proxy = (j.script for j in jobs.chains["b"])
    assert "#SBATCH --exclusive" in sft and "--exclusive" not in proxy  # the built-in rule for the 1-GPU eval
    with pytest.raises(
        LaunchError,
        match="cpus_per_task 16 x 8 ranks per node = 128 CPUs, more than the site's "
        "cpus_per_node 112; lower cpus_per_task to 14",
    ):
        train_job(
            "demo_tiny",
            [GBS, "run_dir=/lustre/r"],
            _site(tmp_path, cpus_per_node=112, train={"nodes": 2, "gpus_per_node": 8, "cpus_per_task": 16}),
        )
    train_job("demo_tiny", [GBS, "run_dir=/lustre/r"], _site(tmp_path, cpus_per_node=112))  # 12 x 8 fits


def test_paths_resolve_against_the_workdir_and_node_local_ones_are_refused(tmp_path):
    site = _site(tmp_path, workdir="/lustre/proj", node_local_paths=None)
    job = train_job("demo_tiny", [GBS, "run_dir=runs/x"], site)
    assert job.run_dir == Path("/lustre/proj/runs/x") and job.config.run_dir == "/lustre/proj/runs/x"
    assert "midtrain.cli train /lustre/proj/runs/x/slurm/config.yaml" in job.script
    job = train_job("demo_tiny", [GBS, f"run_dir={tmp_path}/run"], site)
    with pytest.raises(ConfigError, match=f"run_dir: {tmp_path}/run is under /tmp, which is local to each node"):
        job.write()
    assert not (tmp_path / "run").exists()
    job = train_job("demo_tiny", [GBS, "run_dir=/lustre/x", "data.path=/dev/shm/shards"], site)
    with pytest.raises(ConfigError, match="data.path: /dev/shm/shards is under /dev/shm"):
        job.write()
    jobs = build_chains(_site(tmp_path, node_local_paths=None), tmp_path / "slurm", {"b": [("sft", ["sft"])]})
    with pytest.raises(ConfigError, match="protocol output: .* is under /tmp"):
        write_jobs(jobs)


def test_container_mounts_must_show_host_paths_at_the_same_place(tmp_path):
    site = _site(tmp_path, workdir="/lustre/proj", container_image="img", container_mounts=["/lustre:/data"])
    with pytest.raises(LaunchError, match="maps /lustre to /data, but the job passes host paths"):
        train_job("demo_tiny", [GBS, "run_dir=/lustre/r"], site)
    site = _site(tmp_path, workdir="/lustre/proj", container_image="img", container_mount_home=True)
    job = train_job("demo_tiny", [GBS, "run_dir=/scratch/r"], site)
    assert "--container-mounts=/lustre/proj:/lustre/proj,/scratch/r:/scratch/r" in job.script
    assert "--no-container-mount-home" not in job.script


def test_master_port_stays_below_the_ephemeral_range(tmp_path):
    job = train_job("demo_tiny", [GBS, "run_dir=/lustre/r"], _site(tmp_path, master_port_base=30000))
    line = next(x for x in job.script.splitlines() if x.startswith("export MASTER_PORT="))
    ports = [
        int(
            subprocess.run(
                ["bash", "-c", f"SLURM_JOB_ID={j}; {line}; echo $MASTER_PORT"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for j in (0, 2767, 2768, 99999999)
    ]
    assert ports[0] == 30000 and max(ports) <= 32767
    with pytest.raises(ConfigError, match="master_port_base"):
        _site(tmp_path, master_port_base=32000)


# ---- datatrove's job arrays (prep/pack --executor slurm) ----

SBATCH = r"""#!/bin/bash
# stub sbatch: keeps each submitted script, answers with a job id
n=$(ls "$STUB_DIR/submitted" | wc -l)
cp "${@: -1}" "$STUB_DIR/submitted/$n.sh"
echo "Submitted batch job $((100 + n))"
"""


def _sbatch_stub(tmp_path: Path, monkeypatch) -> Path:
    """Stub commands first on PATH, with an sbatch that keeps each submitted script under STUB/submitted."""
    stub = _stubs(tmp_path)
    (stub / "submitted").mkdir()
    (stub / "bin" / "sbatch").write_text(SBATCH)
    (stub / "bin" / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("STUB_DIR", str(stub))
    return stub


def test_prep_job_array_scripts_quote_site_values_and_run(tmp_path, monkeypatch):
    from datatrove.pipeline.readers import JsonlReader

    from midtrain.launch.prep import slurm_executor

    workdir = tmp_path / f"w {HOSTILE}"
    workdir.mkdir()
    venv = tmp_path / f"v {HOSTILE}"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("export ACTIVATED=1\n")
    site = _site(tmp_path, workdir=str(workdir), venv=str(venv), env={"X": HOSTILE}, partition="cpu")
    stub = _sbatch_stub(tmp_path, monkeypatch)
    logs = tmp_path / "logs"
    slurm_executor(
        [JsonlReader(str(tmp_path))],
        site,
        job_name="mt-prep",
        logging_dir=str(logs),
        slurm_logs_dir=str(tmp_path / "slurm_logs"),
    ).run()
    scripts = sorted((stub / "submitted").iterdir())
    assert len(scripts) == 2  # the array and datatrove's stats merge
    r = _run(scripts[0], stub)
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.rglob("pwned"))
    call = _calls(stub)[0]
    assert call[-2:] == ["launch_pickled_pipeline", str(logs / "executor.pik")]
    # srun gets the CPUs itself (22.05-23.02 do not pass sbatch's on), and a failed stage cancels what waits on it
    assert "--cpus-per-task=1" in call
    assert all("#SBATCH --kill-on-invalid-dep=yes" in p.read_text() for p in scripts)


def test_a_prep_dry_run_prints_the_script_that_is_submitted(tmp_path, monkeypatch):
    """The dry run's script is the one datatrove submits, srun line included (it lacked --cpus-per-task, -n 1
    and a container's flags)."""
    from datatrove.pipeline.readers import JsonlReader

    from midtrain.launch.prep import slurm_executor
    from midtrain.runner import _script

    site = _site(tmp_path, container_image="/images/mt.sqsh", partition="cpu")
    stub = _sbatch_stub(tmp_path, monkeypatch)
    ex = slurm_executor(
        [JsonlReader(str(tmp_path))],
        site,
        job_name="mt-prep",
        logging_dir=str(tmp_path / "logs"),
        slurm_logs_dir=str(tmp_path / "slurm_logs"),
    )
    printed = _script(ex)
    ex.run()
    submitted = sorted((stub / "submitted").iterdir())[0].read_text()
    assert printed == submitted
    assert "--cpus-per-task=1" in printed and "--container-image=/images/mt.sqsh" in printed and " -n 1 " in printed


@pytest.mark.parametrize("command", ["prep", "pack"])
def test_prep_and_pack_refuse_an_output_that_cannot_go_into_datatrove_scripts(tmp_path, command):
    site = tmp_path / "site.yaml"
    site.write_text("partition: cpu\n")
    out = tmp_path / f"out {HOSTILE}"
    prep_in = Path(__file__).resolve().parents[2] / "data_prep" / "samples" / "buildlogs"
    args = (
        ["prep", "buildlogs", "--input", str(prep_in)]
        if command == "prep"
        else ["pack", "--input", str(tmp_path / "prep"), "--seq-length", "256"]
    )
    if command == "pack":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        import random

        from pack_helpers import commit_doc, write_prep

        write_prep(tmp_path / "prep", [commit_doc(i, random.Random(i)) for i in range(2)])
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "midtrain.cli",
            *args,
            "--output",
            str(out),
            "--executor",
            "slurm",
            "--site",
            str(site),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "MIDTRAIN_SITE": ""},
    )
    assert r.returncode != 0 and "cannot go into an #SBATCH line" in r.stderr, r.stderr[-2000:]
    assert "--output" in r.stderr
    assert not list(tmp_path.rglob("pwned"))


def test_dry_run_warns_where_submitting_would_refuse_a_node_local_path(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(f"workdir: {tmp_path}\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "midtrain.cli",
            "submit",
            "train",
            "demo_tiny",
            "run_dir=runs/x",
            "optim.global_batch_size=8",
            "--site",
            str(site),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "MIDTRAIN_SITE": ""},
    )
    assert r.returncode == 0, r.stderr
    assert f"warning: submitting would refuse this: run_dir: {tmp_path}/runs/x is under /tmp" in r.stderr
    assert f"train {tmp_path}/runs/x/slurm/config.yaml" in r.stdout  # resolved against the workdir
    assert not (tmp_path / "runs").exists()


def test_prep_arrays_in_a_container_write_only_under_its_mounts(tmp_path):
    from midtrain.launch.prep import slurm_executor_kwargs

    site = _site(tmp_path, workdir="/lustre/w", container_image="img.sqsh", container_mounts=["/lustre:/lustre"])
    kw = slurm_executor_kwargs(
        site, job_name="j", logging_dir="/lustre/out/logs/source", slurm_logs_dir="/lustre/out/logs/slurm/source"
    )
    assert kw["srun_args"] == {
        "cpus-per-task": "1",
        "container-image": "img.sqsh",
        "container-mounts": "/lustre:/lustre",
        "container-workdir": "/lustre/w --no-container-mount-home",
    }
    # the documents beside an unmounted output would stay inside the container: refused
    with pytest.raises(LaunchError, match="/scratch/out/logs/source is not under any of the site's container_mounts"):
        slurm_executor_kwargs(site, job_name="j", logging_dir="/scratch/out/logs/source")


def test_prep_arrays_refuse_a_node_local_output_when_submitted_not_in_a_dry_run(tmp_path, monkeypatch):
    from datatrove.pipeline.readers import JsonlReader

    from midtrain.launch.prep import slurm_executor

    stub = _sbatch_stub(tmp_path, monkeypatch)
    site = _site(tmp_path, workdir="/lustre/w", node_local_paths=None, partition="cpu")
    ex = slurm_executor([JsonlReader(str(tmp_path))], site, job_name="mt-prep", logging_dir=str(tmp_path / "logs"))
    assert "launch_pickled_pipeline" not in ex.get_launch_file_contents(ex.get_sbatch_args(1), "true")  # renders
    with pytest.raises(ConfigError, match=f"prep/pack --output \\(logging dir\\): {tmp_path}/logs is under /tmp"):
        ex.run()
    assert not list((stub / "submitted").iterdir())
