"""The figures table at the end of bench/gpu_check.sh: every step's outcome, the bf16 training checks and
the throughput rows, from the files the steps left in the results folder.

  python bench/gpu_summary.py out/gpu_check
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


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
        lines.append(f"  training run: {f['train_tokens_per_s']:,.0f} tok/s, {f['train_step_s']:.3f} s/step, MFU {mfu} "
                     f"(a small model: throughput is not the point here)")
    tp = _load(out / "gpu_throughput.json")
    if tp:
        lines += ["", f"throughput: {tp['device']}, {tp['params'] / 1e9:.2f}B params, layers: {tp['impl']}, "
                      f"MFU vs dense BF16 peak {tp['peak_tflops']} TFLOP/s, FP8: {tp['fp8']}"]
        lines.append(f"  {'seq':>6} {'mode':>9} {'recompute':>9} {'tok/s':>9} {'TFLOP/s':>8} {'MFU':>6} "
                     f"{'speedup pred|meas':>18} {'peak GiB':>8}")
        for r in tp["rows"]:
            mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None and r["mfu"] == r["mfu"] else "n/a"
            sp = (f"{r['predicted_speedup']:.2f}x|{r['measured_speedup']:.2f}x" if "predicted_speedup" in r else "")
            err = f"  {r['error']}" if r.get("error") else ""
            lines.append(f"  {r['seq_length']:>6} {r['mode']:>9} {r.get('recompute', 'none'):>9} "
                         f"{r['tokens_per_s']:>9.0f} {r['tflops']:>8.1f} {mfu:>6} {sp:>18} "
                         f"{r['peak_mem_gib']:>8.1f}{err}")
    lines.append("=" * 100)
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1] if len(sys.argv) > 1 else "out/gpu_check")))
