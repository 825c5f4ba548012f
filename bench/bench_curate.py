"""Redaction quality: secret/PII recall on planted real code, false positives on clean real code.

Redaction quality (target: recall >= 99%, <= 1% of clean files changed by secret detectors):
  planted  real .py files (stdlib + this venv's site-packages) written as code, diffs and build logs with
           generated secrets of every kind planted in realistic contexts (midtrain/curate/planted.py);
  clean    other real files with nothing planted. E-mail and IP findings in clean files are reported apart:
           real files carry real author e-mails, which the PII step is meant to remove.
Curation speed (MB/s per core per source and per step, beside a pass-through) is bench/bench_curate_speed.py.

    .venv/bin/python bench/bench_curate.py [--files 1200] [--json out.json]
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from midtrain.curate.planted import measure, plant, read_texts, real_code_files
from midtrain.curate.secrets import Redactor


def redaction(files: int, seed: int) -> dict:
    texts = read_texts(real_code_files(files, seed=seed))
    random.Random(seed).shuffle(texts)
    half = len(texts) // 2
    planted = plant(texts[:half], per_doc=3, seed=seed)
    clean = texts[half:]
    r = Redactor()
    t0 = time.perf_counter()
    rep = measure(r.redact, planted, clean)
    dt = time.perf_counter() - t0
    mb = (sum(len(d.text) for d in planted) + sum(len(t) for _, t in clean)) / 1e6
    return {
        "planted_secrets": rep.planted,
        "planted_docs": len(planted),
        "recall": rep.recall,
        "per_kind_recall": {k: c / n for k, (c, n) in rep.per_kind.items()},
        "clean_files": rep.clean_files,
        "clean_changed_by_secret_detectors": rep.clean_changed_secrets,
        "false_positive_rate": rep.fp_rate,
        "clean_changed_any_detector": rep.any_change_rate,
        "clean_changed_by_kind": rep.clean_changed_by_kind,
        "structure_errors": rep.structure_errors,
        "missed_examples": rep.missed[:5],
        "false_positive_examples": rep.false_positive_examples[:5],
        "redact_mb_per_s": mb / dt,
        "corpus_mb": mb,
    }


def main(argv: list[str] | None = None) -> int:
    from figures import bench_parser

    ap = bench_parser(__doc__)
    ap.add_argument("--files", type=int, default=1200, help="real files sampled (half planted, half clean)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.smoke:
        args.files = 40

    red = redaction(args.files, args.seed)
    print(f"\nSecret/PII redaction on real code ({red['corpus_mb']:.1f} MB)")
    print(f"{'figure':<44}{'value':>12}")
    print(f"{'planted secrets (docs)':<44}{red['planted_secrets']:>7} ({red['planted_docs']})")
    print(f"{'recall (target >= 0.99)':<44}{red['recall']:>12.4f}")
    print(f"{'clean files':<44}{red['clean_files']:>12}")
    print(f"{'clean files changed, secret detectors (<=0.01)':<44}{red['false_positive_rate']:>12.4f}")
    print(f"{'clean files changed, any detector (incl. PII)':<44}{red['clean_changed_any_detector']:>12.4f}")
    print(f"{'diff/line structure errors':<44}{red['structure_errors']:>12}")
    print(f"{'redaction throughput (MB/s, 1 core)':<44}{red['redact_mb_per_s']:>12.2f}")
    print("\nrecall per kind: " + ", ".join(f"{k} {v:.3f}" for k, v in red["per_kind_recall"].items()))
    print("clean files changed by kind: " + json.dumps(red["clean_changed_by_kind"]))
    for kind, line in red["missed_examples"]:
        print(f"  missed {kind}: {line[:100]}")

    if args.json:
        Path(args.json).write_text(json.dumps({"redaction": red}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
