"""Exact dedup with 1 task and with N tasks, side by side: wall time and peak traced memory per stage.

    .venv/bin/python bench/bench_dedup.py --documents 200000 --tasks 4

Synthetic documents (a share of them exact copies, whitespace changed) go through the curation stages with
every step but exact dedup off. The peak memory of a stage is the largest peak of one of its tasks (tasks run
one after the other in this process, traced by tracemalloc): the finder's should not grow with the number of
documents, the signature and filter tasks' should shrink with more tasks. It also checks that both runs keep
the same documents.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datatrove.executor import LocalPipelineExecutor

from midtrain.curate.stages import CurationConfig, curation_stages
from midtrain.formats.documents import document_files, read_jsonl, write_jsonl_gz

OFF = [f"{s}.enabled=false" for s in ("license", "decontam", "quality", "redact")] + ["dedup.near=false"]


def write_raw(raw: Path, documents: int, files: int, dup_share: float, seed: int = 0) -> None:
    rng = random.Random(seed)
    raw.mkdir(parents=True)
    rows: list[dict] = []
    originals: list[str] = []
    for i in range(documents):
        if originals and rng.random() < dup_share:
            text = rng.choice(originals).replace(" ", "  ", 1)
        else:
            text = " ".join(f"w{rng.randrange(50_000)}" for _ in range(60))
            originals.append(text)
        rows.append({"text": text, "id": f"doc-{i}", "metadata": {"source": "pr", "repo": "a/b", "license": "MIT"}})
    for i in range(files):  # document i in file i % files
        write_jsonl_gz(raw / f"{i:05d}.jsonl.gz", rows[i::files])


def run(raw: Path, work: Path, tasks: int) -> dict[str, tuple[int, float, float]]:
    """{stage: (tasks, seconds, peak MB of one task)}."""
    cfg = CurationConfig().apply_overrides(OFF)
    out = {}
    for st in curation_stages(cfg, "pr", str(raw), str(work / "documents"), str(work / "w"), tasks):
        n = st.tasks or tasks
        ex = LocalPipelineExecutor(st.pipeline, tasks=n, workers=1, logging_dir=str(work / "logs" / st.name))
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        t0 = time.perf_counter()
        ex.run()
        out[st.name] = (n, time.perf_counter() - t0, (tracemalloc.get_traced_memory()[1] - base) / 2**20)
    return out


def output_set(documents: Path) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True) for f in document_files(documents) for _, row in read_jsonl(f))


def main(argv: list[str] | None = None) -> int:
    from figures import bench_parser

    ap = bench_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--documents", type=int, default=100_000)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--dup-share", type=float, default=0.3)
    args = ap.parse_args(argv)
    if args.smoke:
        args.documents, args.tasks = 1000, 2
    import logging

    from datatrove.utils.logging import logger

    logger.remove()
    logging.disable(logging.WARNING)
    tracemalloc.start()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        write_raw(raw, args.documents, max(8, args.tasks), args.dup_share)
        one, many = run(raw, Path(tmp) / "one", 1), run(raw, Path(tmp) / "many", args.tasks)
        same = output_set(Path(tmp) / "one" / "documents") == output_set(Path(tmp) / "many" / "documents")
        kept = len(output_set(Path(tmp) / "one" / "documents"))
    print(f"{args.documents} documents, {kept} kept; same documents for 1 and {args.tasks} tasks: {same}")
    print(f"{'stage':<14} {'tasks':>5} {'s':>7} {'peak MB':>8}   {'tasks':>5} {'s':>7} {'peak MB':>8}")
    for name in one:
        (a, sa, ma), (b, sb, mb) = one[name], many[name]
        print(f"{name:<14} {a:>5} {sa:>7.2f} {ma:>8.1f}   {b:>5} {sb:>7.2f} {mb:>8.1f}")
    if args.json:
        per_stage = {
            name: {
                run: {"tasks": t, "seconds": round(sec, 3), "peak_mb": round(mb, 2)}
                for run, (t, sec, mb) in (("one", one[name]), ("many", many[name]))
            }
            for name in one
        }
        Path(args.json).write_text(
            json.dumps(
                {
                    "documents": args.documents,
                    "kept": kept,
                    "tasks": args.tasks,
                    "same_documents": same,
                    "stages": per_stage,
                },
                indent=1,
            )
        )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
