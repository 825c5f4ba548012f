"""The GPU check's CPU parts: the shell script's plan and dependency guard, and the throughput bench in
its tiny CPU mode (the real run needs an H200; see bench/gpu_check.sh)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
LIB = ROOT / "bench" / "gpu_check_lib.sh"
sys.path.insert(0, str(ROOT / "bench"))


def test_script_is_valid_bash_and_prints_its_plan():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    out = subprocess.run([str(SCRIPT), "--dry-run"], capture_output=True, text=True, check=True).stdout
    assert "no-leak" in out and "gpu_throughput.py" in out and "wheels" in out
    assert "test_train_bf16.py" in out and "gpu_train_check.py" in out and "gpu_summary.py" in out
    bad = subprocess.run([str(SCRIPT), "--bogus"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_missing_dependency_without_a_wheel_stops_with_a_clear_message(tmp_path):
    # a python without site-packages stands in for the bare GPU machine (no megatron-core installed)
    bare = tmp_path / "python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    env = {**os.environ, "PYTHON": str(bare), "WHEELS": str(tmp_path / "nowheels"), "OUT": str(tmp_path / "out")}
    r = subprocess.run([str(SCRIPT), "--cpu"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 3
    assert "megatron" in r.stderr and "prepare" in r.stderr


def test_script_plans_the_long_lengths_within_its_limits():
    """The one command measures 32K to 256K, runs the varlen no-leak and gradient tests, and its step limits
    fit a 10-minute command (the throughput bench plans its rows to end before its step's limit)."""
    out = subprocess.run([str(SCRIPT), "--dry-run"], capture_output=True, text=True, check=True).stdout
    assert "--seq 32768 65536 131072 262144" in out and "--budget-s 240" in out
    assert "test_train_attention_backends.py -m gpu" in out and "--rows" in out
    text = SCRIPT.read_text()
    gpu_branch = text.split('if [[ "$MODE" == "gpu" ]]; then', 1)[1].split("\nelse\n", 1)[0]
    limits = [int(x) for x in re.findall(r'^  step "[^"]+" (\d+) ', gpu_branch, flags=re.M)]
    throughput = re.search(r"^THROUGHPUT_LIMIT=(\d+)", text, flags=re.M)
    assert throughput, "no THROUGHPUT_LIMIT= in the script"
    limits += [int(throughput.group(1))]
    kill_after = re.search(r'^KILL_AFTER_S="\$\{KILL_AFTER_S:-(\d+)\}"', LIB.read_text(), flags=re.M)
    assert kill_after, "no KILL_AFTER_S= in the step library"
    # each limit holds: TERM at it, KILL a few seconds later (timeout -k)
    assert len(limits) == 4 and sum(limits) + 4 * int(kill_after.group(1)) <= 560, limits


@pytest.mark.slow
def test_throughput_bench_cpu_mode_writes_the_table(tmp_path, capsys):
    import gpu_summary
    import gpu_throughput

    out = tmp_path / "gpu_throughput.jsonl"
    assert gpu_throughput.main(["--cpu", "--seq", "128", "256", "--mean-doc-tokens", "30", "--rows", str(out)]) == 0
    header, rows = gpu_summary.read_rows(out)
    assert header is not None
    assert header["impl"] == "local" and "not measured" in header["fp8"]
    assert [(r["seq_length"], r["mode"]) for r in rows] == [
        (128, "documents"),
        (128, "causal"),
        (256, "documents"),
        (256, "causal"),
    ]
    assert {r["backend"] for r in rows} == {"per_document"}  # no varlen kernel on the CPU
    for masked, causal in zip(rows[::2], rows[1::2]):
        assert causal["documents"] == 1 and masked["documents"] > 1
        assert masked["flops_per_token"] < causal["flops_per_token"]
        assert masked["error"] is None and causal["timed_steps"] >= 1 and causal["tokens_per_s"] > 0
        assert 0 < causal["loss"] < 20
    printed = capsys.readouterr().out
    assert "FP8" in printed and "attention" in printed and "per_document" in printed
    # the estimator's prediction beside each measured peak (NaN on the CPU), growing with the sequence
    assert "est GiB" in printed and all(r["est_mem_gib"] > 0 for r in rows)
    assert rows[2]["est_mem_gib"] > rows[0]["est_mem_gib"]
    speedup = causal["flops_per_token"] / masked["flops_per_token"]
    assert f"{speedup:.2f}x|" in printed  # the closing table's FLOP-model speedup at 256K


def test_bench_loss_is_the_models_own(tmp_path):
    """The bench's chunked loss over the output layer's input equals the model's loss from its labels (the
    model is built with its final norm and output layer, post_process=True)."""
    import gpu_throughput
    import torch

    from midtrain.train import distributed
    from midtrain.train.model import build_gpt_model

    distributed.initialize(seed=5)
    try:
        cfg = gpu_throughput.bench_config(64, cpu=True)
        model = build_gpt_model(cfg, pre_process=True, post_process=True)
        toks = torch.randint(0, cfg.model.vocab_size, (1, 65), generator=torch.Generator().manual_seed(0))
        pos = torch.arange(64)[None]
        own = model(toks[:, :64], pos, attention_mask=None, labels=toks[:, 1:]).mean()
        with gpu_throughput.final_hidden(model) as out:
            empty = model(toks[:, :64], pos, attention_mask=None)
        assert empty.numel() == 0  # the output layer saw no rows
        ours = gpu_throughput.chunked_lm_loss(out["hidden"], out["weight"], toks[0, 1:], chunk=24)
        torch.testing.assert_close(ours, own)
    finally:
        distributed.destroy()


def test_a_failed_row_is_a_row_and_a_killed_run_keeps_its_rows(tmp_path):
    """Any error (here: an explicit varlen request on the CPU) becomes a row with its error, written before
    the next; a last line cut off by a kill is left out of the summary, the rows before it are shown."""
    import gpu_summary
    import gpu_throughput
    import torch

    from midtrain.train import distributed
    from midtrain.train.model import build_gpt_model

    distributed.initialize(seed=5)
    try:
        cfg = gpu_throughput.bench_config(64, cpu=True)
        model = build_gpt_model(cfg, pre_process=True, post_process=True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        lengths = [20, 44]
        rows = [
            gpu_throughput.run_row(
                lambda _: (model, opt), "none", backend, cfg, lengths, 1, 0, torch.device("cpu"), "local", 0.0
            )
            for backend in ("varlen", "per_document")
        ]
    finally:
        distributed.destroy()
    assert rows[0]["error"].startswith("ValueError: precision.portable_attention=varlen cannot run here")
    assert rows[1]["error"] is None and rows[1]["timed_steps"] == 1 and rows[1]["loss"] > 0
    path = tmp_path / gpu_summary.THROUGHPUT_ROWS
    with path.open("w") as f:
        gpu_throughput.write_row(
            f,
            {
                "kind": "header",
                "device": "CPU",
                "torch": torch.__version__,
                "impl": "local",
                "params": 1e6,
                "peak_tflops": None,
                "fp8": "not measured",
            },
        )
        for backend, r in zip(("varlen", "per_document"), rows):
            gpu_throughput.write_row(
                f,
                {
                    **r,
                    "kind": "row",
                    "seq_length": 64,
                    "mode": "documents",
                    "backend": backend,
                    "documents": 2,
                    "flops_per_token": 1e6,
                    "tflops": 1.0,
                },
            )
        f.write('{"kind": "row", "seq_length": 128, "mo')  # killed mid-line
    table = gpu_summary.summary(tmp_path)
    assert "attention" in table and "varlen cannot run here" in table and "per_document" in table
    assert "   128 " not in table and len(gpu_summary.read_rows(path)[1]) == 2


@pytest.mark.parametrize(
    "left, warmup, expected",
    [
        (None, 2, 2),  # no budget: as asked
        (100.0, 1, 1),  # warmup and a step fit (1.3 x 10 s each)
        (20.0, 1, 0),  # only the timed step fits: the warmup goes
        (10.0, 1, None),  # not even one step: skipped
    ],
)
def test_rows_are_planned_within_the_budget(left, warmup, expected):
    import gpu_throughput

    steps, skip = gpu_throughput.plan_row(flops=10e12, rate=1e12, left=left, warmup=warmup)
    if expected is None:
        assert skip is not None and skip.startswith("skipped: predicted 13 s a step, 10 s of --budget-s left")
    else:
        assert skip is None and steps == expected


def test_document_lengths_fill_the_sequence_deterministically():
    import gpu_throughput

    a = gpu_throughput.document_lengths(65_536, seed=3, mean_tokens=3000)
    assert sum(a) == 65_536 and min(a) >= 1 and len(a) > 5
    assert a == gpu_throughput.document_lengths(65_536, seed=3, mean_tokens=3000)


@pytest.mark.slow
def test_train_check_cpu_mode_and_the_summary_table(tmp_path):
    """bench/gpu_train_check.py on CPU: the bf16 run's loss falls and init_from keeps the weights; the
    summary table carries the checks and the figures."""
    import gpu_summary
    import gpu_train_check

    out = tmp_path / "out"
    assert gpu_train_check.main(["--cpu", "--steps", "12", "--json", str(out / "train_check.json")]) == 0
    result = json.loads((out / "train_check.json").read_text())
    names = [c["name"] for c in result["checks"]]
    assert any("loss falls" in n for n in names) and any("midtrain checkpoint" in n for n in names)
    assert any("hf2mcore conversion" in n for n in names)  # convert -> train (TE layers where TE imports)
    assert all(c["ok"] for c in result["checks"] if c["ok"] is not None)
    (out / "steps.tsv").write_text("3 bf16 training + init_from check\tok\t12\t\n")
    table = gpu_summary.summary(out)
    assert "GPU CHECK SUMMARY" in table and "loaded weights survive" in table and "tok/s" in table
    assert "3 bf16 training + init_from check" in table


def _steps(tmp_path: Path, out: Path, body: str, **env: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run BODY after sourcing the step library (as gpu_check.sh does); the rows of OUT/steps.tsv."""
    out.mkdir(parents=True, exist_ok=True)
    script = f'set -euo pipefail\nROOT={ROOT}\nOUT={out}\nPYTHON={sys.executable}\nFAILED=0\nsource {LIB}\n{body}\necho "FAILED=$FAILED"\n'
    r = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=300, env={**os.environ, **env}, cwd=tmp_path
    )
    rows = (
        [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()]
        if (out / "steps.tsv").exists()
        else []
    )
    return r, rows


def test_a_step_that_carries_on_after_its_limits_term_is_killed(tmp_path):
    """The trainer checkpoints on TERM and goes on (55 s under a 25 s limit): TERM at the limit, KILL after."""
    import time

    t0 = time.monotonic()
    r, rows = _steps(
        tmp_path,
        tmp_path / "out",
        f'step "slow" 1 {tmp_path}/slow.txt bash -c "trap \'\' TERM; sleep 120"',
        KILL_AFTER_S="2",
    )
    assert time.monotonic() - t0 < 60, "the step outlived its limit"
    assert r.returncode == 0 and "FAILED=1" in r.stdout, r.stderr
    assert rows[0][0] == "slow" and rows[0][1] == "FAIL" and rows[0][3] == "timed out after 1s", rows


@pytest.mark.parametrize(
    "errors,result",
    [
        ([None, "skipped: predicted 13 s a step, 10 s of --budget-s left"], "ok"),
        (["OutOfMemoryError: CUDA out of memory", "RuntimeError: x"], "FAIL"),  # every row failed: not ok
        ([None, "OutOfMemoryError: CUDA out of memory"], "FAIL"),  # one row failed
        ([], "FAIL"),  # nothing measured
    ],
)
def test_the_throughput_step_fails_when_a_row_failed(tmp_path, errors, result):
    out = tmp_path / "out"
    out.mkdir()
    with (out / "gpu_throughput.jsonl").open("w") as f:
        f.write(json.dumps({"kind": "header", "device": "X"}) + "\n")
        for e in errors:
            f.write(json.dumps({"kind": "row", "seq_length": 64, "error": e}) + "\n")
    r, rows = _steps(tmp_path, out, f'STEP_VERDICT=throughput_verdict step "4 throughput" 30 {out}/t.txt true')
    assert rows[0][1] == result, (rows, r.stdout, r.stderr)
    assert ("FAILED=1" in r.stdout) == (result == "FAIL")
    assert rows[0][3].startswith(f"{errors.count(None)} of {len(errors)} rows measured"), rows


def test_a_pytest_step_passes_with_out_inside_the_checkout(tmp_path):
    """The default OUT (out/gpu_check) and the README's --cpu example are inside the checkout, where the
    step's own log made the suite's checkout check fail every pytest step. (The folder is removed after.)"""
    import shutil
    import uuid

    made_out = not (ROOT / "out").exists()
    out = ROOT / "out" / f"gpu_check_test_{uuid.uuid4().hex[:8]}"
    try:
        r, rows = _steps(
            tmp_path,
            out,
            f'step "1 tests" 240 {out}/t.txt {sys.executable} -m pytest -q -p no:cacheprovider '
            f"{ROOT}/tests/test_hf_gpu_check.py -k document_lengths_fill",
        )
        log = (out / "t.txt").read_text()
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if made_out:
            shutil.rmtree(ROOT / "out", ignore_errors=True)
    assert rows and rows[0][1] == "ok" and "1 passed" in rows[0][3], (rows, log[-2000:])


def test_the_bf16_step_on_a_gpu_selects_no_test_exact_on_cpu_only():
    """Step 2 asserted bit-identical losses that hold only on CPU (GPU kernels are not bit-deterministic)."""
    m = re.search(r'^BF16_ON_GPU="([^"]+)"', SCRIPT.read_text(), flags=re.M)
    assert m, "no BF16_ON_GPU= in the script"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "test_train_bf16.py"),
            "-k",
            m.group(1),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "MIDTRAIN_CHECKOUT_CHECK": "0"},
    )
    chosen = [line for line in r.stdout.splitlines() if "::" in line]
    assert chosen and all("bitwise" not in c and "kill" not in c for c in chosen), r.stdout
