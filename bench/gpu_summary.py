"""The figures table at the end of bench/gpu_check.sh: every step's outcome, the bf16 training checks and
the throughput rows, from the files the steps left in the results folder. The throughput table (also
printed by bench/gpu_throughput.py) is here, so both show the same columns.

  python bench/gpu_summary.py out/gpu_check
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

THROUGHPUT_ROWS = "gpu_throughput.jsonl"  # bench/gpu_throughput.py --rows: a header line, then one per row
ROW_HEAD = (
    f"{'seq':>6} {'mode':>9} {'attention':>18} {'recompute':>9} {'docs':>5} {'steps':>5} {'tok/s':>9} "
    f"{'TFLOP/s':>8} {'MFU':>6} {'GFLOP/tok':>9} {'loss':>7} {'peak GiB':>8} {'est GiB':>7} {'speedup pred|meas':>17}"
)


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_rows(path: Path) -> tuple[dict | None, list[dict]]:
    """The header and rows of a --rows file; a line cut off by a killed run is left out."""
    header, rows = None, []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None, []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("kind") == "header":
            header = record
        elif record.get("kind") == "row":
            rows.append(record)
    return header, rows


def _num(x: float | None, fmt: str, width: int) -> str:
    return f"{'n/a' if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt):>{width}}"


def row_line(r: dict, speedup: str = "") -> str:
    """One throughput row under ROW_HEAD; a failed or skipped row shows its error."""
    steps = f"{r.get('warmup_steps', 0)}+{r.get('timed_steps', 0)}"
    line = (
        f"{r['seq_length']:>6} {r['mode']:>9} {r.get('backend', '?'):>18} {r.get('recompute', 'none'):>9} "
        f"{r['documents']:>5} {steps:>5} {_num(r['tokens_per_s'], '.0f', 9)} {_num(r['tflops'], '.1f', 8)} "
        f"{_num(r.get('mfu'), '.1%', 6)} {_num(r['flops_per_token'] / 1e9, '.2f', 9)} "
        f"{_num(r.get('loss'), '.3f', 7)} {_num(r['peak_mem_gib'], '.1f', 8)} "
        f"{_num(r.get('est_mem_gib'), '.1f', 7)} {speedup:>17}"
    )
    return line + (f"  {r['error']}" if r.get("error") else "")


def _speedup(masked: dict, rows: list[dict]) -> str:
    """FLOP-model and measured speedup of a document-masked row over the causal row of its length."""
    causal = next((c for c in rows if c["seq_length"] == masked["seq_length"] and c["mode"] == "causal"), None)
    if masked["mode"] != "documents" or causal is None:
        return ""
    predicted = causal["flops_per_token"] / masked["flops_per_token"]
    measured = causal["seconds_per_step"] / masked["seconds_per_step"]
    return f"{predicted:.2f}x|" + ("n/a" if math.isnan(measured) else f"{measured:.2f}x")


def throughput_table(header: dict | None, rows: list[dict]) -> list[str]:
    """The throughput rows with the speedup of each document-masked row over causal at its length."""
    lines = []
    if header:
        lines.append(
            f"throughput: {header['device']}, torch {header.get('torch', '?')}, "
            f"{header['params'] / 1e9:.2f}B params, layers: {header['impl']}, "
            f"MFU vs dense BF16 peak {header['peak_tflops']} TFLOP/s, FP8: {header['fp8']}"
        )
    lines.append("  " + ROW_HEAD)
    lines += ["  " + row_line(r, _speedup(r, rows)) for r in rows]
    return lines


def summary(out: Path) -> str:
    lines = ["", "=" * 100, "GPU CHECK SUMMARY", "=" * 100]
    steps = out / "steps.tsv"
    if steps.is_file():
        lines.append(f"{'step':<44} {'result':<8} {'seconds':>7}  detail")
        for row in steps.read_text().splitlines():
            name, result, seconds, *detail = row.split("\t")
            lines.append(f"{name:<44} {result:<8} {seconds:>7}  {' '.join(detail)}")
    tc = _load(out / "train_check.json")
    if tc:
        lines += ["", f"bf16 training checks (trainer, vocab {tc['vocab']}, seq {tc['seq_length']}, fp8={tc['fp8']}):"]
        for c in tc["checks"]:
            mark = "ok" if c["ok"] else ("skipped" if c["ok"] is None else "FAIL")
            lines.append(f"  {mark:<8} {c['name']}: {c['detail']}")
        f = tc["figures"]
        mfu = f"{f['train_mfu']:.1%}" if f.get("train_mfu") else "n/a"
        lines.append(
            f"  training run: {f['train_tokens_per_s']:,.0f} tok/s, {f['train_step_s']:.3f} s/step, MFU {mfu} "
            f"(a small model: throughput is not the point here)"
        )
    header, rows = read_rows(out / THROUGHPUT_ROWS)
    if header or rows:
        lines += ["", *throughput_table(header, rows)]
    lines.append("=" * 100)
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1] if len(sys.argv) > 1 else "out/gpu_check")))
