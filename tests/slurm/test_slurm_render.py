"""Rendering without a cluster: golden scripts (2 nodes x 8 GPUs), quoting, rejection of unsafe values."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from midtrain.commands.submit import train_job
from midtrain.config import ConfigError
from midtrain.launch.protocol_job import StepJob, build_chains
from midtrain.launch.shell import LaunchError, check_bash, clean, directive, q
from midtrain.launch.site import SiteConfig, load_site, time_to_seconds
from midtrain.protocol import ProtocolConfig, check_submission, protocol_jobs
from recipes import get_recipe, resolve_probe

GOLDEN = Path(__file__).with_name("golden")
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"  # UPDATE_GOLDEN=1 pytest tests/slurm -k golden: rewrite them

GPU_SITE = {
    "name": "golden-h200",
    "partition": "gpu",
    "account": "proj-swe",
    "workdir": "/lustre/proj/midtrain",
    "venv": "/lustre/proj/midtrain/.venv",
    "sbatch_args": ["--exclusive"],
    "env": {"NCCL_SOCKET_IFNAME": "^lo,docker", "NCCL_IB_HCA": "mlx5"},
    "train": {"nodes": 2, "gpus_per_node": 8, "cpus_per_task": 16, "mem": "0", "time": "04:00:00"},
}


GBS = "optim.global_batch_size=64"  # demo_tiny's batch of 1 cannot be split over 16 data-parallel ranks


def _site(**changes) -> SiteConfig:
    return SiteConfig.from_dict({**GPU_SITE, **changes}).validate()


def _protocol(*overrides: str) -> ProtocolConfig:
    cfg = get_recipe("protocol_demo").build(list(overrides))
    assert isinstance(cfg, ProtocolConfig)
    return cfg


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"golden file {path} missing (UPDATE_GOLDEN=1 writes it)"
    assert text == path.read_text(), f"rendered script differs from {path} (UPDATE_GOLDEN=1 to accept)"


def test_golden_train_gpu_2x8_venv():
    job = train_job(
        "demo_tiny", [GBS, "run_dir=/lustre/proj/runs/golden", "parallel.tensor=2", "optim.train_steps=1000"], _site()
    )
    _check_golden("train_gpu_2x8_venv.sbatch", job.script)
    # what a cluster engineer checks first
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=8" in job.script
    assert "#SBATCH --requeue" in job.script and "#SBATCH --signal=B:USR1@300" in job.script
    assert 'scontrol requeue "${SLURM_JOB_ID}"' in job.script


def test_golden_train_gpu_2x8_container():
    site = _site(venv=None, container_image="nvcr.io#nvidia/pytorch:25.09-py3", container_mounts=["/lustre:/lustre"])
    job = train_job("demo_tiny", [GBS, "run_dir=/lustre/proj/runs/golden"], site)
    _check_golden("train_gpu_2x8_container.sbatch", job.script)
    srun = next(line for line in job.script.splitlines() if line.startswith("srun --kill-on-bad-exit"))
    assert "--container-image='nvcr.io#nvidia/pytorch:25.09-py3'" in srun
    assert "--container-mounts=/lustre:/lustre" in srun  # covers the workdir and the run dir: nothing added
    # unnamed: pyxis removes the container when the step ends (a named one stays on every node, job after job)
    assert "--container-name" not in srun and "--no-container-mount-home" in srun
    assert "activate" not in job.script


def test_golden_train_cpu():
    site = _site(train={"nodes": 1, "gpus_per_node": 0, "tasks_per_node": 2, "cpus_per_task": 1, "time": "00:30:00"})
    job = train_job("demo_tiny", [GBS, "run_dir=/lustre/proj/runs/cpu"], site)
    _check_golden("train_cpu_1x2.sbatch", job.script)
    assert "gpus-per-node" not in job.script and "CUDA_DEVICE_MAX_CONNECTIONS" not in job.script


def test_golden_protocol_steps():
    # fixed steps, so the golden files pin the Slurm rendering, not the protocol's argv
    steps = {
        "base": [
            ("sft", ["sft", "sft_probe", "--from", "/ckpt/base", "--output", "/p/base/sft"]),
            ("eval_proxy", ["eval", "proxy", "--checkpoint", "/ckpt/base", "--output", "/p/base/proxy"]),
        ]
    }
    jobs = build_chains(
        _site(),
        Path("/lustre/proj/protocol/slurm"),
        steps,
        ("report", ["report", "base=/p/base", "--output", "/p/report"]),
        "mt-golden",
    )
    assert jobs.final is not None
    _check_golden("protocol_base_sft.sbatch", jobs.chains["base"][0].script)
    _check_golden("protocol_base_eval_proxy.sbatch", jobs.chains["base"][1].script)
    _check_golden("protocol_report.sbatch", jobs.final.script)
    # SFT runs one rank per GPU; the proxy eval is a single process on one GPU; the report is a CPU job
    assert "#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=8" in jobs.chains["base"][0].script
    assert "#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=1" in jobs.chains["base"][1].script
    assert "gpus-per-node" not in jobs.final.script


def test_protocol_recipe_becomes_one_chain_per_checkpoint():
    from midtrain.protocol import protocol_steps

    cfg = _protocol("output=/lustre/proj/protocol").validate()
    jobs = protocol_jobs(cfg, _site())
    steps = protocol_steps(cfg)
    assert list(jobs.chains) == list(steps) == list(cfg.checkpoints)
    for name, chain in jobs.chains.items():
        assert all(isinstance(j, StepJob) for j in chain)
        assert [(j.step, j.argv) for j in chain if isinstance(j, StepJob)] == [(s.name, s.argv) for s in steps[name]]
        assert all(j.script_path.parent == Path("/lustre/proj/protocol/slurm") for j in chain)
    assert jobs.final is not None and jobs.final.argv[0] == "report"


RANK = 'python -m midtrain.launch.rank "$STATUS_DIR" midtrain.cli '


def _argv_from_script(script: str, launcher: str) -> list[str]:
    """Run the rendered launch line with printf instead of the launcher: the words bash really passes."""
    line = next(line for line in script.splitlines() if launcher in line)
    cmd = "printf '%s\\n' " + line.split(launcher, 1)[1].removesuffix(" &")
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_train_job_replays_the_resolved_config(tmp_path):
    run_dir = tmp_path / "run"
    path = "/data/a b;$(touch /tmp/pwned)`id`'\"*"
    job = train_job(
        "demo_tiny", [GBS, f"run_dir={run_dir}", f"data.path={path}", "optim.train_steps=7"], _site(node_local_paths=[])
    )
    argv = _argv_from_script(job.script, RANK)
    assert argv == ["train", str(run_dir / "slurm" / "config.yaml")]
    assert path not in job.script  # the override travels in config.yaml, never through the shell
    job.write()
    from midtrain.train.config import TrainConfig

    saved = TrainConfig.from_yaml(run_dir / "slurm" / "config.yaml")
    assert saved.data.path == path and saved.optim.train_steps == 7 and saved.run_dir == str(run_dir)


def test_step_argv_reaches_the_job_verbatim_and_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"data_dir=/data/a b;$(touch {marker})`touch {marker}`'\"*"
    jobs = build_chains(_site(), tmp_path / "slurm", {"base": [("sft", ["sft", "probe", hostile])]})
    argv = _argv_from_script(jobs.chains["base"][0].script, RANK)
    assert argv == ["sft", "probe", hostile]
    assert not marker.exists()


@pytest.mark.parametrize("override", ["data.path=/x\nrm -rf /", "name=a\rb", "data.path=\x1b[31m"])
def test_control_characters_are_rejected(override):
    with pytest.raises(LaunchError, match="control character"):
        train_job("demo_tiny", [GBS, override], _site())


def test_values_that_cannot_go_into_sbatch_lines_name_the_field():
    with pytest.raises(LaunchError, match="log file"):  # a space in the run dir would split #SBATCH --output
        train_job("demo_tiny", [GBS, "run_dir=/lustre/my runs/x"], _site())
    with pytest.raises(LaunchError, match="job name"):
        train_job("demo_tiny", [GBS, "run_dir=/r", "name=x$(id)"], _site())
    with pytest.raises(LaunchError, match="partition"):
        train_job("demo_tiny", [GBS, "run_dir=/r"], _site(partition="gpu;id"))
    with pytest.raises(LaunchError, match="env: 'BAD-NAME'"):
        train_job("demo_tiny", [GBS, "run_dir=/r"], _site(env={"BAD-NAME": "1"}))


def test_site_values_in_the_body_are_quoted(tmp_path):
    site = _site(workdir="/lustre/with space/$(id)", env={"X": "a'b $HOME"})
    job = train_job("demo_tiny", [GBS, "run_dir=/r"], site)
    assert "cd '/lustre/with space/$(id)'" in job.script
    out = subprocess.run(
        [
            "bash",
            "-c",
            next(line for line in job.script.splitlines() if line.startswith("export X=")) + '; printf %s "$X"',
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "a'b $HOME"


def test_layout_must_fit_the_allocation():
    with pytest.raises(ConfigError, match="global_batch_size: 1 is not divisible by the data-parallel size 16"):
        train_job("demo_tiny", ["run_dir=/r"], _site())
    with pytest.raises(ConfigError, match="parallel.data"):
        train_job("demo_tiny", [GBS, "run_dir=/r", "parallel.data=3"], _site())
    with pytest.raises(ConfigError, match="tensor\\*pipeline\\*context=3 does not divide the world size 16"):
        train_job("demo_tiny", [GBS, "run_dir=/r", "model.num_layers=3", "parallel.pipeline=3"], _site())


def test_what_the_jobs_would_refuse_after_the_queue_is_refused_at_submission():
    container = _site(venv=None, container_image="img.sqsh", container_mounts=["/lustre:/lustre"])
    # a path the ranks read that no mount covers is not there inside the container
    with pytest.raises(
        LaunchError, match=r"init_from: /scratch/ckpt is not under any directory mounted into the container \(/lustre"
    ):
        train_job("demo_tiny", [GBS, "run_dir=/lustre/proj/runs/x", "init_from=/scratch/ckpt"], container)
    train_job("demo_tiny", [GBS, "run_dir=/lustre/proj/runs/x", "init_from=/lustre/ckpt"], container)
    train_job("demo_tiny", [GBS, "run_dir=/lustre/proj/runs/x", "init_from=ckpt/base"], container)  # in the workdir
    train_job("demo_tiny", [GBS, "run_dir=/r", "init_from=/scratch/ckpt"], _site())  # no container: any path
    # the probe's batch over the sft step's 8 ranks (one per GPU), and the protocol's checkpoints in a container
    cfg = _protocol("output=/lustre/proj/protocol").validate()
    with pytest.raises(ConfigError, match=r"sft_recipe sft_probe_demo: train.optim.global_batch_size: 1 is not divis"):
        check_submission(cfg, _site(), resolve_probe(cfg))
    cfg = _protocol(
        "output=/lustre/p", "sft_overrides=[train.optim.global_batch_size=8]", "checkpoints={a: /lustre/a, b: /s/b}"
    )
    cfg.baseline = "a"
    check_submission(cfg.validate(), _site(), resolve_probe(cfg))
    with pytest.raises(LaunchError, match=r"checkpoints.b: /s/b is not under any directory mounted"):
        check_submission(cfg, container, resolve_probe(cfg))


def test_a_sweep_whose_probe_batch_does_not_divide_is_refused_before_submitting(tmp_path, capsys):
    """sweep --submit runs the protocol's probe-layout check: the demo probe's batch of 1 over the default
    site's 8 sft ranks is refused before any job (a dry run warns and still prints the scripts)."""
    from midtrain.cli import main

    over = [f"output={tmp_path}"]
    assert main(["sweep", "sweep_demo", *over, "--submit", "--site-set", "train.gpus_per_node=0", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "warning: submitting would refuse this: sft_recipe sft_probe_demo" in err and "#!/bin/bash" in out
    assert main(["sweep", "sweep_demo", *over, "--submit", "--site-set", "train.gpus_per_node=0"]) == 2
    assert "global_batch_size: 1 is not divisible by the data-parallel size 8" in capsys.readouterr().err
    assert not (tmp_path / "slurm").exists()  # nothing written, nothing submitted


def test_site_config_errors_name_the_field(tmp_path):
    bad = tmp_path / "site.yaml"
    bad.write_text(yaml.safe_dump({"train": {"time": "four hours"}}))
    with pytest.raises(ConfigError, match="train.time: 'four hours' is not a Slurm time"):
        load_site(bad)
    bad.write_text(yaml.safe_dump({"partiton": "gpu"}))
    with pytest.raises(ConfigError, match="did you mean 'partition'"):
        load_site(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_site(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="venv"):
        load_site(None, ["container_image=img", "venv=/v"])


def test_example_site_config_loads_and_renders():
    site = load_site(Path(__file__).resolve().parents[2] / "slurm" / "site.example.yaml")
    job = train_job("demo_tiny", [GBS, "run_dir=/r"], site)
    assert "#SBATCH --partition=gpu" in job.script and "#SBATCH --account=my-project" in job.script
    assert site.prep.partition == "cpu" and site.step_resources("report").gpus_per_node == 0


def test_shell_helpers():
    assert q("a b", "x") == "'a b'" and clean("ok", "x") == "ok"
    assert directive("gpu-h200_1:2", "x") == "gpu-h200_1:2"
    with pytest.raises(LaunchError, match="field: ''"):
        directive("", "field")
    with pytest.raises(LaunchError, match="does not parse"):
        check_bash("if then fi")
    assert time_to_seconds("1-02:03:04") == 93784 and time_to_seconds("30") == 1800
    assert time_to_seconds("05:00") == 300 and time_to_seconds("2-03") == 183600


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "midtrain.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "MIDTRAIN_SITE": ""},
    )


def test_cli_dry_run_prints_the_script_and_writes_nothing(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump(GPU_SITE))
    run_dir = tmp_path / "run"
    r = _cli(
        "submit",
        "train",
        "demo_tiny",
        f"run_dir={run_dir}",
        GBS,
        "--site",
        str(site),
        "--nodes",
        "4",
        "--time",
        "1-00:00:00",
        "--dry-run",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#!/bin/bash") and "#SBATCH --nodes=4" in r.stdout
    assert "#SBATCH --time=1-00:00:00" in r.stdout
    assert not run_dir.exists()
    check_bash(r.stdout)
    r = _cli("submit", "train", "demo_tiny", "run_dir=/r", GBS, "--site", str(site), "--time", "soon", "--dry-run")
    assert r.returncode == 2 and "time: 'soon' is not a Slurm time" in r.stderr
    r = _cli("submit", "protocol", "protocol_demo", f"output={tmp_path / 'p'}", "--site", str(site), "--dry-run")
    assert r.returncode == 0, r.stderr
    # the demo probe's batch of 1 over the site's 8 sft ranks: shown, and submitting would refuse it
    assert "warning: submitting would refuse this: sft_recipe sft_probe_demo: train.optim.global_batch_size" in r.stderr
    assert re.findall(r"^### .*?-(\w+)\.sbatch", r.stdout, re.M) == ["sft", "eval_proxy", "sft", "eval_proxy", "report"]


def test_cli_help_teaches_with_an_example():
    r = _cli("submit", "train", "--help")
    assert r.returncode == 0 and "midtrain submit train" in r.stdout and "--dry-run" in r.stdout


def test_single_process_steps_run_once_per_node_whatever_gpus_they_hold(tmp_path):
    """A site that gives only `default` (8 GPUs, one rank per GPU): the SFT probe keeps 8 ranks, every eval and
    the report run one process per node (two lm-eval ranks exported one HF model twice and both wrote the
    results as rank 0); a single-process step's own entry asking for more ranks is refused naming it."""
    site = SiteConfig.from_dict(
        {"name": "t", "workdir": str(tmp_path), "protocol": {"default": {"gpus_per_node": 8}}}
    ).validate()
    steps = {"base": [("sft", ["sft"]), ("eval_proxy", ["eval"]), ("eval_lm_eval", ["eval"]), ("eval_swebench", ["e"])]}
    jobs = build_chains(site, tmp_path / "slurm", steps, ("report", ["report"]))
    scripts = {j.step: j.script for j in [*jobs.chains["base"], jobs.final] if isinstance(j, StepJob)}
    ranks = {step: re.findall(r"^#SBATCH --ntasks-per-node=(\d+)$", text, re.M) for step, text in scripts.items()}
    assert ranks == {
        "sft": ["8"],
        "eval_proxy": ["1"],
        "eval_lm_eval": ["1"],
        "eval_swebench": ["1"],
        "report": ["1"],
    }
    gpus = {step: re.findall(r"^#SBATCH --gpus-per-node=(\d+)$", text, re.M) for step, text in scripts.items()}
    # the GPUs stay the job's; the built-in one-GPU evals and the CPU report merge over the site's default
    assert gpus == {"sft": ["8"], "eval_proxy": ["1"], "eval_lm_eval": ["1"], "eval_swebench": ["8"], "report": []}
    site.protocol["eval_lm_eval"] = {"gpus_per_node": 2, "tasks_per_node": 2}
    with pytest.raises(LaunchError, match=r"site protocol.eval_lm_eval.tasks_per_node: 2, but step eval_lm_eval"):
        build_chains(site, tmp_path / "slurm", {"base": [("eval_lm_eval", ["eval"])]})


def test_site_protocol_entries_merge_field_by_field_over_the_built_in_steps(tmp_path):
    """A site's protocol map is merged, not swapped in: a site writing only `default` keeps the built-in eval and
    report entries (derived from its default, so a CPU-only site asks for no GPU anywhere), and a step entry
    that changes one field keeps the others. Typos and bad values name protocol.STEP.FIELD."""

    def site_of(protocol: dict, overrides: list[str] | None = None) -> SiteConfig:
        path = tmp_path / "site.yaml"
        path.write_text(yaml.safe_dump({"name": "t", "workdir": str(tmp_path), "protocol": protocol}))
        return load_site(path, overrides)

    site = site_of({"default": {"gpus_per_node": 4, "cpus_per_task": 12, "time": "08:00:00"}})
    proxy, report, swe = (site.step_resources(s) for s in ("eval_proxy", "report", "eval_swebench"))
    assert (proxy.gpus_per_node, proxy.cpus_per_task, proxy.time, proxy.exclusive) == (1, 12, "02:00:00", False)
    assert (report.gpus_per_node, report.time) == (0, "00:30:00")
    assert (swe.gpus_per_node, swe.tasks_per_node, swe.time) == (4, 1, "1-00:00:00")
    assert site.step_resources("sft") == site.step_resources("default")

    cpu = site_of({"default": {"gpus_per_node": 0, "tasks_per_node": 2}})
    assert {s: cpu.step_resources(s).gpus_per_node for s in ("sft", "eval_proxy", "eval_lm_eval", "report")} == {
        "sft": 0,
        "eval_proxy": 0,
        "eval_lm_eval": 0,
        "report": 0,
    }
    # the same through a command-line change of the default
    assert (
        site_of({"default": {}}, ["protocol.default.gpus_per_node=0"]).step_resources("eval_proxy").gpus_per_node == 0
    )

    one = site_of({"default": {"gpus_per_node": 8}, "eval_proxy": {"time": "05:00:00"}})
    assert (one.step_resources("eval_proxy").time, one.step_resources("eval_proxy").gpus_per_node) == ("05:00:00", 1)

    with pytest.raises(ConfigError, match=r"unknown field 'protocol.eval_proxy.tme' \(did you mean 'time'\?\)"):
        site_of({"default": {}, "eval_proxy": {"tme": "05:00:00"}})
    with pytest.raises(ConfigError, match=r"protocol.report.time: 'soon' is not a Slurm time"):
        site_of({"default": {}, "report": {"time": "soon"}})
