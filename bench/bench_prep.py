"""Prep throughput per source on one core: documents/s and MB/s of document text produced.

Each reader runs in-process (one datatrove task, no executor) on real local inputs: this project's git
repository (repos, commits) and the shipped samples scaled up (pulls, build logs, traces). Table rows read
the same content from Parquet in the public datasets' schemas (this repository as The Stack v1 file rows,
grouped back into a repository; the traces as a table). A last row runs the whole `midtrain prep` stage chain (reader ->
writer -> curation stage with its steps off -> stats) on the
pulls input, so the executor and I/O overhead shows next to the bare reader.

    .venv/bin/python bench/bench_prep.py [--json out.json] [--scale 1.0]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLES = ROOT / "data_prep" / "samples"


def _scaled_inputs(tmp: Path, scale: float) -> dict[str, Path]:
    """Larger inputs made from the samples (unique ids so nothing collapses into one)."""
    prs = [json.loads(line) for line in (SAMPLES / "pulls" / "sample_prs.jsonl").read_text().splitlines()]
    with open(tmp / "prs.jsonl", "w") as f:
        for i in range(int(600 * scale)):
            pr = dict(prs[i % len(prs)], number=10_000 + i)
            f.write(json.dumps(pr) + "\n")
    logs = tmp / "logs"
    logs.mkdir()
    samples = sorted((SAMPLES / "buildlogs" / "logs").iterdir())
    for i in range(int(200 * scale)):
        src = samples[i % len(samples)]
        (logs / f"{i:04d}_{src.name}").write_bytes(src.read_bytes())
    big = [f"[{i:05d}] Compiling module_{i % 97} (step {i})" for i in range(int(60_000 * scale))]
    big[len(big) // 2] = "error: linker failed: undefined reference to `main'"
    (logs / "huge_build.log").write_text("\n".join(big) + "\n")
    traces = [json.loads(line) for line in (SAMPLES / "traces" / "openhands_sample.jsonl").read_text().splitlines()]
    with open(tmp / "traces.jsonl", "w") as f:
        for i in range(int(400 * scale)):
            f.write(json.dumps(dict(traces[i % len(traces)], instance_id=f"bench__{i}")) + "\n")
    return {"pulls": tmp / "prs.jsonl", "buildlogs": logs, "traces": tmp / "traces.jsonl"}


def _input_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and ".git" not in p.parts)


def _measure(name: str, make_reader, input_bytes: int, repeat: int = 1) -> dict:
    docs = out_bytes = 0
    t0 = time.perf_counter()
    for _ in range(repeat):
        reader = make_reader()
        for d in reader.run():
            docs += 1
            out_bytes += len(d.text.encode())
    dt = time.perf_counter() - t0
    return {
        "source": name,
        "documents": docs,
        "seconds": round(dt, 3),
        "docs_per_s": round(docs / dt, 1),
        "out_MB_per_s": round(out_bytes / dt / 1e6, 2),
        "in_MB_per_s": round(input_bytes * repeat / dt / 1e6, 2),
        "out_MB": round(out_bytes / 1e6, 3),
    }


def _stack_table(tmp: Path, head_bytes: int) -> Path:
    """This repository's HEAD files as The Stack v1 file rows (Parquet, rows shuffled), for the table rows."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from midtrain.sources.git import head_commit, list_tree, read_blobs

    sha = head_commit(ROOT)
    entries = [e for e in list_tree(ROOT, sha) if e.mode in ("100644", "100755")]
    rows = []
    for e_sha, data in read_blobs(ROOT, sorted({e.sha for e in entries})):
        text = data.decode("utf-8", "replace")
        rows += [
            {
                "max_stars_repo_name": "bench/midtrain",
                "max_stars_repo_path": e.path,
                "content": text,
                "max_stars_repo_head_hexsha": sha,
                "max_stars_repo_licenses": ["Apache-2.0"],
                "max_stars_count": 1,
            }
            for e in entries
            if e.sha == e_sha
        ]
    random.Random(0).shuffle(rows)
    path = tmp / "stack" / "train-00000.parquet"
    path.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=256)
    return path


class _TableRepos:
    """The two table stages of `prep repos` (partition rows by repository, assemble) in-process, one task."""

    def __init__(self, table: Path, tmp: Path):
        from datatrove.pipeline.writers import JsonlWriter

        from midtrain.sources.buckets import bucket_filename
        from midtrain.sources.repo_tables import RepoAssembler, RepoRowPartitioner

        rows = tempfile.mkdtemp(dir=tmp)
        self.partition = RepoRowPartitioner([str(table)], buckets=1)
        self.writer = JsonlWriter(rows, output_filename=bucket_filename())
        self.assembler = RepoAssembler(rows, 1)

    def run(self):
        for _ in self.writer.run(self.partition.run()):  # the writer closes its files at the end
            pass
        yield from self.assembler.run()


def _measure_prep_chain(pulls: Path, out: Path) -> dict:
    """The pulls prep chain with curation off: executor, writer, reader and stats, no curation steps."""
    import logging

    from datatrove.utils.logging import logger as dt_logger

    from midtrain.sources.prep import prep

    dt_logger.remove()
    logging.disable(logging.INFO)
    try:
        from midtrain.curate.stages import STEP_NAMES

        no_curation = [f"{s}.enabled=false" for s in STEP_NAMES]
    except ImportError:
        no_curation = []
    t0 = time.perf_counter()
    stats = prep("pulls", [str(pulls)], out, no_curation)
    assert stats is not None  # None only for a dry run
    dt = time.perf_counter() - t0
    return {
        "source": "pulls (prep chain, curation off)",
        "documents": stats["documents_out"],
        "seconds": round(dt, 3),
        "docs_per_s": round(stats["documents_out"] / dt, 1),
        "out_MB_per_s": round(stats["bytes_out"] / dt / 1e6, 2),
        "in_MB_per_s": round(_input_bytes(pulls) / dt / 1e6, 2),
        "out_MB": round(stats["bytes_out"] / 1e6, 3),
    }


def main() -> int:
    from figures import bench_parser

    ap = bench_parser(__doc__)
    ap.add_argument("--scale", type=float, default=1.0, help="input size multiplier (default 1.0)")
    args = ap.parse_args()
    if args.smoke:
        args.scale = 0.02
    rep = 1 if args.smoke else None

    from midtrain.sources.buildlogs import BuildLogReader
    from midtrain.sources.commits import CommitReader
    from midtrain.sources.pulls import PullReader
    from midtrain.sources.repos import RepoReader
    from midtrain.sources.traces import TraceReader, TracesConfig

    counts = dict(
        line.split(": ")
        for line in subprocess.run(
            ["git", "-C", str(ROOT), "count-objects", "-v"], capture_output=True, text=True
        ).stdout.splitlines()
    )
    git_bytes = (int(counts.get("size", 0)) + int(counts.get("size-pack", 0))) * 1024  # object store, compressed
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        inputs = _scaled_inputs(Path(tmp), args.scale)
        tree = subprocess.run(
            ["git", "-C", str(ROOT), "ls-tree", "-r", "-l", "HEAD"], capture_output=True, text=True
        ).stdout
        head_bytes = sum(int(line.split()[3]) for line in tree.splitlines() if line.split()[3].isdigit())
        rows.append(_measure("repos", lambda: RepoReader([str(ROOT)]), head_bytes, repeat=rep or 5))
        table = _stack_table(Path(tmp), head_bytes)
        rows.append(
            _measure("repos (Stack table rows)", lambda: _TableRepos(table, Path(tmp)), head_bytes, repeat=rep or 5)
        )
        rows.append(_measure("commits", lambda: CommitReader([str(ROOT)]), git_bytes, repeat=rep or 3))
        rows.append(_measure("pulls", lambda: PullReader([str(inputs["pulls"])]), _input_bytes(inputs["pulls"])))
        rows.append(
            _measure("buildlogs", lambda: BuildLogReader([str(inputs["buildlogs"])]), _input_bytes(inputs["buildlogs"]))
        )
        rows.append(
            _measure(
                "traces (plain)",
                lambda: TraceReader([str(inputs["traces"])], TracesConfig(format="plain")),
                _input_bytes(inputs["traces"]),
            )
        )
        tpl = TraceReader([str(inputs["traces"])], TracesConfig(format="chat_template"))
        tpl._template_tokenizer()  # load the tokenizer outside the timed region
        rows.append(_measure("traces (chat template)", lambda: tpl, _input_bytes(inputs["traces"])))
        import pyarrow as pa
        import pyarrow.parquet as pq

        from midtrain.sources.trace_tables import TracesInputConfig, TraceTableReader

        records = [json.loads(line) for line in inputs["traces"].read_text().splitlines()]
        for r in records:  # a Parquet column holds one type: nested lists as JSON strings, as many datasets do
            for key in ("messages", "tools"):
                if key in r:
                    r[key] = json.dumps(r[key])
        pq.write_table(pa.Table.from_pylist(records), Path(tmp) / "traces.parquet")
        rows.append(
            _measure(
                "traces (plain, Parquet table)",
                lambda: TraceTableReader([str(Path(tmp) / "traces.parquet")], TracesInputConfig(format="plain")),
                _input_bytes(inputs["traces"]),
            )
        )

        # the whole stage chain through datatrove's local executor, side by side with the bare reader
        rows.append(_measure_prep_chain(inputs["pulls"], Path(tmp) / "out"))

    cols = ["source", "documents", "seconds", "docs_per_s", "out_MB_per_s", "in_MB_per_s", "out_MB"]
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    print("prep throughput, one core (reader in-process unless noted)")
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths)))
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": "prep", "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
