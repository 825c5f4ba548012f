"""Every command line shown in README.md, docs/*.md, CONTRIBUTING.md, slurm/README.md and the `--help` epilogs
runs as written.

The examples run through bash (so `~`, globs and `>` work as in a user's shell) with HOME pointing at tiny
stand-ins for the paths they name (~/src/proj is a small git repository, ~/models/Qwen3-8B-Base a tiny random
Qwen3, prs.parquet a few pull requests ...). They fall into independent groups (:func:`group`), each run in
its own workspace in the order the docs show them, so pytest-xdist can run groups side by side: what an
example builds (the demo's .demo/, a prep output, a training run) is built once there, and the examples
that document reuse (a rerun, `--only`, a second protocol on the same checkpoints) reuse it as a user
would. Each example is planned below as one of:

  run     executed as shown; must exit 0
  submit  would submit to a cluster: executed with --dry-run
  gpu     needs GPUs (or a real-size model): parsed by the real parser and its config resolved and validated
  other   not a midtrain command line; the reason says what checks it

An example without a plan entry (a new one in the docs) fails test_every_example_has_a_plan: add it here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from documented_examples import DOCS, EXAMPLE_TIMES, REPO, documented_examples, markdown_examples

RUN, SUBMIT, GPU, OTHER = "run", "submit", "gpu", "other"

PLAN: dict[str, str] = {
    "make demo": OTHER,  # the Makefile's demo target is `midtrain demo` (checked below), run as `midtrain demo --workdir .demo`
    "make demo-real": OTHER,  # the Makefile's demo-real target is `midtrain demo --model smollm2` (checked below);
    # its ~50 minutes run by hand (docs/real_model.md); tests/test_real_model.py runs its stages at a small size
    "make test": OTHER,  # this test suite
    "make lint": OTHER,  # run by make test (ruff and mypy)
    ".venv/bin/pre-commit install": OTHER,  # run by tests/test_precommit.py in a scratch repository, then commits
    "midtrain demo --workdir .demo": RUN,
    "midtrain prep repos --input ~/src/proj --output out/prep/repos": RUN,
    "midtrain pack --input out/prep/* --output out/shards --seq-length 2048": RUN,
    "midtrain train demo_tiny data.path=out/shards run_dir=runs/mine optim.train_steps=4": RUN,
    "midtrain submit protocol protocol_demo --dry-run": RUN,
    "midtrain report base=runs/p/base midtrained=runs/p/mid --output report/": RUN,
    "midtrain recipes": RUN,
    "midtrain config demo_tiny optim.lr=1e-3 data.seq_length=4096": RUN,
    "midtrain config qwen3_8b_256k_h200": RUN,
    "midtrain prep repos --input ~/src/proj ~/mirrors/other.git --output out/prep/repos": RUN,
    "midtrain prep commits --input ~/src/proj --output out/prep/commits commits.max_doc_bytes=500000": RUN,
    "midtrain prep traces --input runs/ --output out/prep/traces traces.only_resolved=true "
    "traces.resolved_report=runs/report.json": RUN,
    "midtrain prep pulls --input prs.parquet --output out/prep/pulls --executor slurm --tasks 64 "
    "--site site.yaml --dry-run": RUN,
    "midtrain prep repos redact.enabled=false dedup.max_repo_duplicate_fraction=0.8 --input ~/src "
    "--output out/prep/repos": RUN,
    "midtrain prep pulls decontam.repo_list=/abs/bench_repos.txt decontam.instances='[/abs/verified.jsonl]' "
    "--input prs.jsonl --output out/prep/pulls": RUN,
    "midtrain pack --input out/prep/repos out/prep/pulls out/prep/traces --output out/shards --seq-length 262144": RUN,
    "midtrain pack --input out/prep/* --output out/shards --mixture swe_midtrain pad_multiple=16 seed=1": RUN,
    "midtrain pack --input /lustre/prep/* --output /lustre/shards tasks=512 tokenize_tasks=512 --executor slurm "
    "--site site.yaml": SUBMIT,
    "midtrain prep repos --input ~/src/proj --output s3://my-bucket/prep/repos": RUN,  # the workspace's S3 server
    "midtrain pack --input s3://my-bucket/prep/repos --output s3://my-bucket/shards --seq-length 2048": RUN,
    "aws s3 sync s3://my-bucket/shards /lustre/shards": RUN,  # awscli (dev extra) against the same server
    "midtrain inspect out/shards": RUN,
    "midtrain inspect out/shards --sample 0 --png lengths.png": RUN,
    "midtrain train demo_tiny optim.train_steps=4 run_dir=runs/try": RUN,
    "torchrun --nproc-per-node 2 -m midtrain.cli train demo_tiny parallel.tensor=2 optim.train_steps=4 "
    "run_dir=runs/tp2": RUN,
    "midtrain train runs/try/config.yaml optim.train_steps=8 optim.schedule_on_resume=config": RUN,
    "midtrain convert hf2mcore ~/models/Qwen3-8B-Base ckpt/qwen3-8b --tp 2": RUN,
    "midtrain train qwen3_8b_256k_h200 init_from=ckpt/qwen3-8b": GPU,
    "midtrain convert mcore2hf runs/qwen3_8b_256k_h200 export/qwen3-8b-mt": RUN,
    "midtrain demo --only protocol": RUN,
    "midtrain sft sft_probe_demo --from .demo/runs/demo_tiny --output runs/probe/mid": RUN,
    "midtrain eval proxy --checkpoint .demo/runs/demo_tiny --output runs/proxy/mid shards=.demo/shards "
    "retrieval.repos=.demo/prep/repos retrieval.lengths=[512,1024,2048] max_sequences=4": RUN,
    "midtrain eval swebench --checkpoint runs/probe/mid/hf --output runs/swe/mid benchmarks=[verified] "
    "instance_slice=0:50 max_context=4096 max_output_tokens=1024": RUN,
    "sbatch runs/swe/mid/swebench.sbatch": OTHER,  # the script the example before wrote: exists, `bash -n` clean
    "midtrain eval swebench --collect --output runs/swe/mid": RUN,
    "midtrain submit protocol protocol_swebench checkpoints.base=runs/probe/base/hf "
    "checkpoints.midtrained=runs/probe/mid/hf --dry-run": RUN,
    "midtrain submit train qwen3_8b_256k_h200 --site mysite.yaml --nodes 32 --dry-run": RUN,
    "midtrain submit train qwen3_8b_256k_h200 --site mysite.yaml --nodes 32 --time 2-00:00:00": SUBMIT,
    "midtrain submit protocol protocol_demo --site mysite.yaml": SUBMIT,
    "midtrain prep pulls --input prs.parquet --output out/prep/pulls --executor slurm --tasks 64 "
    "--site mysite.yaml": SUBMIT,
    "midtrain prep repos --input ~/src/myrepo ~/mirrors/other.git --output out/prep/repos": RUN,
    "midtrain prep commits --input ~/src/myrepo --output out/prep/commits commits.max_doc_bytes=500000": RUN,
    "midtrain prep traces --input runs/*.traj.json --output out/prep/traces traces.only_resolved=true "
    "traces.resolved_report=runs/report.json": RUN,
    "midtrain prep pulls --input prs.parquet --output out/prep/pulls --executor slurm --tasks 64 "
    "--site site.yaml --partition cpu --time 02:00:00 --dry-run": RUN,
    "midtrain pack --input out/prep/repos out/prep/pulls --output out/shards --seq-length 262144": RUN,
    "midtrain pack --input out/prep/* --output out/shards --seq-length 2048 --mixture swe_midtrain "
    "pad_multiple=16 valid_fraction=0.01 mixture.total_tokens=500000000000": RUN,
    "midtrain pack --input /lustre/prep/* --output /lustre/shards tasks=512 tokenize_tasks=256 --executor slurm "
    "--site site.yaml --dry-run": RUN,
    "midtrain pack --input out/prep/traces --output out/sft --tokenizer ~/models/Qwen3-8B": RUN,
    "midtrain inspect out/shards --json": RUN,
    "midtrain split --input out/prep/* --output out/split.json": RUN,
    "midtrain inspect out/shards --split-file out/split.json": RUN,
    "midtrain inspect out/shards --sample 0 1": RUN,
    "midtrain inspect out/shards --png lengths.png": RUN,
    "torchrun --nproc-per-node 8 -m midtrain.cli train qwen3_8b_256k_h200 precision.fp8=hybrid": GPU,
    "midtrain sft sft_probe_demo --from runs/base --output runs/probe/base data_dir=runs/probe/sft_data "
    "train.optim.lr=5e-4": RUN,
    "midtrain eval swebench --checkpoint runs/p/midtrained/sft/hf --output runs/p/midtrained/swebench "
    "benchmarks=[verified] instance_slice=0:50 max_steps=100 max_context=4096 max_output_tokens=1024": RUN,
    "midtrain eval swebench --collect --output runs/p/midtrained/swebench": RUN,
    "midtrain report base=.demo/runs/protocol/base midtrained=.demo/runs/protocol/midtrained "
    "--output .demo/report": RUN,
    "midtrain report --protocol protocol_demo": RUN,
    "midtrain submit train qwen3_8b_256k_h200 --site slurm/site.example.yaml --nodes 32 --dry-run": RUN,
    "midtrain submit train demo_tiny optim.train_steps=200 optim.global_batch_size=2 --site-set "
    "train.gpus_per_node=0 --tasks-per-node 2 --time 01:00:00": SUBMIT,
    "midtrain submit protocol protocol_demo --local": RUN,
    "midtrain convert hf2mcore ~/models/Qwen3-1.7B-Base ckpt/qwen3-1.7b --tp 2": RUN,
    "midtrain train qwen3_1p7b_256k_h200 init_from=ckpt/qwen3-1.7b": GPU,
    "midtrain convert mcore2hf runs/qwen3_1p7b_256k_h200 export/qwen3-1.7b-midtrained --dtype bf16": RUN,
    "midtrain recipes --kind train": RUN,
    "midtrain config demo_tiny --yaml-only > run.yaml": RUN,
    "midtrain config prep repos repos.max_doc_bytes=500000 redact.enabled=false": RUN,
    "midtrain config pack seq_length=4096 pad_multiple=16": RUN,
    "midtrain config protocol_demo": RUN,
    "midtrain prep repos repos.columns.license=max_stars_repo_licenses --input s3://my-bucket/the-stack/data/python "
    "--output /lustre/prep/repos --executor slurm --tasks 64 --site site.yaml --dry-run": RUN,
    "midtrain plan --total-tokens 500e9 --gpus 512 --tokens-per-s-per-gpu 8000 --input repos=3TB "
    "commits=1TB pulls=200GB traces=50GB buildlogs=300GB --mixture repos=0.55 commits=0.15 pulls=0.1 traces=0.1 "
    "buildlogs=0.1": RUN,
    "midtrain plan --total-tokens 20e9 --gpus 8 --tokens-per-s-per-gpu 9000 --input repos=40Gtok traces=2Gtok "
    "--mixture repos=0.9 traces=0.1 --rate curate=2.0 repos=1.1 --task-hours 1": RUN,
    # bench/ scripts: run with their README arguments by tests/test_hf_gpu_check.py
    "bench/gpu_check.sh --dry-run": OTHER,
    "midtrain decontam index benchorg/benchlib=tests/data/decontam/benchorg__benchlib "
    "--output /tmp/bench_index.json.gz": RUN,
    "midtrain prep repos decontam.index=/tmp/bench_index.json.gz --input data_prep/samples/repo "
    "--output /tmp/prep_idx": RUN,
    "midtrain inspect out/prep/repos": RUN,
    "midtrain inspect out/shards --card": RUN,
    "midtrain train demo_tiny_moe optim.train_steps=2 run_dir=runs/moe": RUN,
    "torchrun --nproc-per-node 2 -m midtrain.cli train demo_tiny_moe parallel.expert=2 optim.train_steps=2 "
    "run_dir=runs/ep2": RUN,
    "midtrain config qwen3_30b_a3b_256k_h200": RUN,
    "midtrain eval lm-eval --checkpoint .demo/runs/demo_tiny --output runs/lm_eval/mid limit=4": RUN,
    "midtrain eval lm-eval --checkpoint runs/p/midtrained/sft/hf --output out/lm_eval device=cuda "
    "tasks=[humaneval,mbpp] allow_code_execution=true": GPU,
    "midtrain demo --only prep": RUN,
    "midtrain sweep sweep_demo": RUN,
    "midtrain sweep sweep_demo --dry-run": RUN,
    "midtrain sweep sweep_demo --submit --site-set train.gpus_per_node=0 --dry-run": RUN,
    "midtrain sweep sweep_swe_ablations --submit --site slurm/site.example.yaml --dry-run": RUN,
    "midtrain sweep sweep_demo --report": RUN,
    "midtrain sweep sweep_real_gpu --dry-run": RUN,
    "midtrain sweep sweep_real_gpu --submit --site slurm/site.example.yaml --dry-run": RUN,
}

# The docs' absolute paths, placed inside the workspace.
ABSOLUTE = ("/abs/", "/lustre/", "/tmp/")

# Groups of examples that share a workspace, and the example each starts with (it builds what the others read).
FIRST = {"demo": "midtrain demo --workdir .demo", "train": "midtrain demo --only prep"}
# What a group runs before its examples when the example that builds it is another group's: the sweep reads
# the demo's prep outputs, which `midtrain demo --only prep` (the train group's first example) writes. A
# second prep (seconds) lets the sweep and the trainings, minutes each, run on different workers.
SETUP = {"sweep": ["midtrain demo --only prep"]}


def group(cmd: str) -> str:
    """Which workspace an example runs in: the examples that read what another example writes run with it.

    demo   the demo (.demo/) and all that reads it: its runs, protocol, probes, evals and reports
    train  the trainings on the demo's prep outputs (`midtrain demo --only prep` first; the first training
           packs the demo shards from them, as `midtrain train` does, and the others reuse the shards)
    sweep  the demo sweep and its dry runs and report, on the same prep outputs (SETUP)
    data   prep, pack, inspect, object storage and the training on the README's own out/shards
    misc   the rest: configs, recipes, plans, conversions, dry-run submissions
    """
    words = cmd.split()
    sub = words[words.index("midtrain.cli") + 1] if "midtrain.cli" in words else words[1] if len(words) > 1 else ""
    if sub == "sweep":
        return "sweep"
    if cmd == FIRST["train"]:
        return "train"
    if (
        sub == "demo"
        or words[0] == "sbatch"
        or "protocol" in cmd
        or any(m in cmd for m in (".demo/", "runs/p/", "runs/probe", "runs/base", "runs/swe/"))
    ):
        return "demo"
    if sub in ("prep", "pack", "split", "inspect", "decontam") or words[0] == "aws" or "out/shards" in cmd:
        return "data"
    if sub == "train":
        return "train"
    return "misc"


GROUPS = ("demo", "train", "sweep", "data", "misc")
# Minutes each: marked `heavy`, which tests/conftest.py schedules first after the Slurm unit (in this order, the longest first), so
# the xdist workers start them side by side and the short tests fill in around them.
HEAVY = ("demo", "train", "sweep")


def _midtrain_argv(cmd: str) -> list[str]:
    """The words after `midtrain` (or after `torchrun ... -m midtrain.cli`)."""
    words = shlex.split(cmd.split(" > ")[0])
    if words[0] == "torchrun":
        words = words[words.index("midtrain.cli") + 1 :]
    else:
        assert words[0] == "midtrain", cmd
        words = words[1:]
    return words


def test_every_example_has_a_plan():
    shown = [cmd for _, cmd in documented_examples()]
    missing = [c for c in shown if c not in PLAN]
    stale = [c for c in PLAN if c not in shown]
    assert not missing, "examples shown in the docs without a plan here (add them to PLAN):\n" + "\n".join(missing)
    assert not stale, "PLAN entries no longer shown anywhere (remove them):\n" + "\n".join(stale)


def test_every_guide_is_read():
    """Each Markdown page under docs/ is among the pages whose examples run (a new guide cannot hide one)."""
    guides = {str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")}
    assert guides <= set(DOCS), sorted(guides - set(DOCS))
    assert all((REPO / doc).is_file() for doc in DOCS), [doc for doc in DOCS if not (REPO / doc).is_file()]


def test_markdown_examples_reads_fenced_and_indented_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Prose naming midtrain recipes is not a command.\n\n"
        "```bash\nmidtrain recipes   # a comment\nmidtrain config demo_tiny \\\n    optim.lr=1e-3\n```\n\n"
        "    midtrain inspect out/shards\n    not a command\n"
    )
    assert markdown_examples(page) == [
        "midtrain recipes",
        "midtrain config demo_tiny optim.lr=1e-3",
        "midtrain inspect out/shards",
    ]


def test_make_demo_is_midtrain_demo():
    recipe = (REPO / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "midtrain demo" in recipe
    real = (REPO / "Makefile").read_text().split("\ndemo-real:", 1)[1].split("\n\n", 1)[0]
    assert "midtrain demo --model smollm2" in real


@pytest.mark.parametrize("cmd", [c for c, kind in PLAN.items() if kind != OTHER and c.split()[0] != "aws"])
def test_every_midtrain_example_parses_and_resolves_its_config(cmd):
    """Quick check of every example: the real parser accepts it and a train config resolves and validates."""
    from midtrain.cli import build_parser

    argv = _midtrain_argv(cmd)
    args = build_parser().parse_args(argv)
    if args.command == "train" and not args.recipe.endswith(".yaml"):
        from recipes import load_train_config as load_config

        load_config(args.recipe, args.overrides)
    if args.command == "config":
        from midtrain.cli import main

        assert main(argv) == 0


def _git(repo: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Ada",
        "GIT_AUTHOR_EMAIL": "ada@example.org",
        "GIT_COMMITTER_NAME": "Ada",
        "GIT_COMMITTER_EMAIL": "ada@example.org",
    }
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


@pytest.fixture
def workspace(tmp_path_factory, request) -> Iterator[tuple[Path, dict[str, str]]]:
    """Tiny stand-ins for every path the examples name, and an S3 API server on loopback (moto's server mode)
    with the bucket the object-storage examples use; yields (workspace, environment). One per group."""
    sys.path.insert(0, str(REPO / "tests"))
    from hf_helpers import make_hf_model, save_tiny_tokenizer

    from midtrain.demo.inputs import NOT_SAMPLES

    which = getattr(request, "param", "all")  # the group
    ws = tmp_path_factory.mktemp(f"examples_{which}")
    if which == "demo":  # the demo runs as a user runs it: inside a clone of the checkout, whose pyproject.toml
        # (pytest addopts) and tests/conftest.py sit above .demo/, where the agent leg grades its testbeds
        subprocess.run(["git", "clone", "-q", str(REPO), str(ws)], check=True, capture_output=True)
    (ws / "tmp").mkdir()
    home = ws / "home"
    samples = REPO / "data_prep" / "samples"
    for name in ("proj", "myrepo"):
        repo = home / "src" / name
        shutil.copytree(samples / "repo", repo, ignore=NOT_SAMPLES)
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"{name}: initial import")
        (repo / "README.md").write_text((repo / "README.md").read_text() + "\nMore docs.\n")
        _git(repo, "commit", "-q", "-am", "docs: more")
    (home / "mirrors").mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(home / "src" / "proj"), str(home / "mirrors" / "other.git")],
        check=True,
        capture_output=True,
    )
    save_tiny_tokenizer(home / "models" / "Qwen3-8B")
    if which in ("misc", "all"):  # only the conversions read the models
        for model in ("Qwen3-8B-Base", "Qwen3-1.7B-Base"):
            make_hf_model("qwen3", home / "models" / model)
    runs = ws / "runs"
    runs.mkdir()
    for trace in samples.glob("traces/*.traj*"):
        shutil.copy(trace, runs / trace.name)
    ids = [p.name.split(".traj")[0] for p in runs.iterdir()]
    (runs / "report.json").write_text(json.dumps({"resolved_ids": ids}))
    rows = [json.loads(line) for line in (samples / "pulls" / "sample_prs.jsonl").read_text().splitlines() if line]
    shutil.copy(samples / "pulls" / "sample_prs.jsonl", ws / "prs.jsonl")
    import pyarrow as pa
    import pyarrow.parquet as pq

    table: list[dict] = []  # the sample rows that share one Arrow schema (the samples vary it on purpose)
    for row in rows:
        try:
            pa.Table.from_pylist(table + [row])
            table.append(row)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
    pq.write_table(pa.Table.from_pylist(table), ws / "prs.parquet")
    for name in ("site.yaml", "mysite.yaml"):
        shutil.copy(REPO / "slurm" / "site.example.yaml", ws / name)
    (ws / "slurm").mkdir(exist_ok=True)
    shutil.copy(REPO / "slurm" / "site.example.yaml", ws / "slurm" / "site.example.yaml")
    (ws / "abs").mkdir()
    (ws / "abs" / "bench_repos.txt").write_text("octo/some-benchmark-repo\n")
    (ws / "abs" / "verified.jsonl").write_text(
        json.dumps(
            {
                "instance_id": "octo__bench-1",
                "repo": "octo/bench",
                "problem_statement": "the parser drops the last "
                "line of a file when it has no trailing newline and the caller expects every line back",
                "patch": "--- a/p.py\n+++ b/p.py\n",
            }
        )
        + "\n"
    )
    # names the examples use for directories other examples (or the demo) write
    (ws / "lustre" / "prep").mkdir(parents=True)
    for source in ("repos", "pulls", "traces"):
        (ws / "lustre" / "prep" / source).symlink_to(ws / "out" / "prep" / source)
    (runs / "p" / "midtrained").mkdir(parents=True)
    links = {
        "runs/base": ".demo/runs/demo_tiny",
        "runs/p/base": ".demo/runs/protocol/base",
        "runs/p/mid": ".demo/runs/protocol/midtrained",
        "runs/p/midtrained/sft": "runs/probe/mid",
        "runs/qwen3_8b_256k_h200": "ckpt/qwen3-8b",
        "runs/qwen3_1p7b_256k_h200": "ckpt/qwen3-1.7b",
    }
    for link, target in links.items():
        (ws / link).symlink_to(ws / target)
    (ws / "runs" / "probe").mkdir()
    (ws / "runs" / "probe" / "midtrained").mkdir()
    for shown in ("tests", "data_prep"):  # examples that name the repository's own fixtures and samples
        if not (ws / shown).exists():  # (a clone has its own)
            (ws / shown).symlink_to(REPO / shown)
    bin_dir = ws / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "midtrain"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m midtrain.cli "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        "HOME": str(home),
        "PYTHONPATH": str(REPO),
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "MIDTRAIN_CACHE": os.environ.get("MIDTRAIN_CACHE", str(Path.home() / ".cache" / "midtrain")),
    }
    env.pop("MIDTRAIN_SITE", None)
    # tests/conftest.py pins one thread for in-process tests. Beside other xdist workers an example keeps that
    # one thread too: two 2-thread trainings on 2 cores spin in each other's OpenMP barriers. Run alone
    # (`make test XDIST=0`, or one group) it uses every core as for a user; torchrun gives each rank one thread.
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) < 2:
        env.pop("OMP_NUM_THREADS", None)
    if which not in ("data", "all"):  # only the object-storage examples use the S3 server
        yield ws, env
        return
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        }
    )
    import boto3

    boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket="my-bucket")
    yield ws, env
    server.stop()


def _output_dir(cmd: str) -> str | None:
    words = shlex.split(cmd)
    return words[words.index("--output") + 1] if "--output" in words else None


def _run_example(cmd: str, kind: str, ws: Path, env: dict[str, str]) -> tuple[float, float, str | None]:
    """Run one example; returns its wall time, its CPU time and a failure description (None when it passed)."""
    # one pass, at the start of a path only (the workspace itself is under /tmp)
    line = re.sub(r"(?<![\w./-])(" + "|".join(map(re.escape, ABSOLUTE)) + ")", lambda m: f"{ws}{m.group(1)}", cmd)
    if kind == SUBMIT:
        line += " --dry-run"
    out = _output_dir(line)
    words = line.split()
    if out and len(words) > 1 and words[1] in ("prep", "pack") and "--dry-run" not in words:
        shutil.rmtree(ws / out, ignore_errors=True)  # each example as a fresh user runs it, not a resume
    start, cpu0 = time.monotonic(), _children_cpu()
    r = subprocess.run(["bash", "-c", line], cwd=ws, env=env, capture_output=True, text=True, timeout=1800)
    seconds, cpu = time.monotonic() - start, _children_cpu() - cpu0
    if r.returncode != 0:
        return seconds, cpu, f"$ {cmd}\nexit {r.returncode} after {seconds:.0f} s\n{r.stderr[-2500:]}"
    return seconds, cpu, None


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children: an example's cost on a loaded machine."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def group_order(name: str) -> list[str]:
    """The group's examples in the order the docs show them, its FIRST example first."""
    order = [c for _, c in documented_examples() if group(c) == name]
    if name in FIRST:
        order.remove(FIRST[name])
        order.insert(0, FIRST[name])
    return order


def test_every_group_runs_something():
    """Each group has examples to run (a group emptied by a docs change would hide nothing, but says so)."""
    for name in GROUPS:
        assert any(PLAN[c] in (RUN, SUBMIT) for c in group_order(name)), name
    # a group's setup is a documented example another group runs as shown
    assert all(PLAN.get(c) == RUN and group(c) != name for name, cmds in SETUP.items() for c in cmds), SETUP


@pytest.mark.slow
@pytest.mark.parametrize(
    "workspace", [pytest.param(g, marks=[pytest.mark.heavy] if g in HEAVY else []) for g in GROUPS], indirect=True
)
def test_documented_examples_run(workspace, request):
    """Every `run` and `submit` example of one group in the order the docs show them, sharing one workspace.
    Each one's wall and CPU time go to the terminal summary (tests/conftest.py), slowest first."""
    ws, env = workspace
    name = request.node.callspec.params["workspace"]
    failures = []
    times: list[tuple[float, float, str]] = []
    request.node.user_properties.append((EXAMPLE_TIMES, times))
    for cmd in SETUP.get(name, []):
        seconds, cpu, failure = _run_example(cmd, RUN, ws, env)
        times.append((seconds, cpu, f"(setup) {cmd}"))
        assert failure is None, f"the {name} group's setup failed:\n{failure}"
    for cmd in group_order(name):
        kind = PLAN[cmd]
        if kind in (RUN, SUBMIT):
            seconds, cpu, failure = _run_example(cmd, kind, ws, env)
            times.append((seconds, cpu, cmd))
            if failure:
                failures.append(failure)
        elif cmd.startswith("sbatch "):
            script = ws / cmd.split()[1]
            if not script.is_file():
                failures.append(f"$ {cmd}\n{script} was not written by the example before it")
            else:
                r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
                if r.returncode:
                    failures.append(f"$ {cmd}\n{r.stderr}")
    assert not failures, f"{len(failures)} documented example(s) failed:\n\n" + "\n\n".join(failures)
    if name == "demo":  # in a checkout too, the oracle endpoint (gold patches) resolves every embedded task
        # read from each column's results: the later `report --protocol protocol_demo` example rewrites
        # .demo/report with the recipe's own evals (proxy only), as the config it names says
        cols = sorted((ws / ".demo" / "runs" / "protocol").glob("*/swebench/swebench_results.json"))
        rates = {p.parts[-3]: json.loads(p.read_text())["local_oracle"]["rate"] for p in cols}
        assert set(rates) == {"base", "midtrained"} and set(rates.values()) == {1.0}, rates
