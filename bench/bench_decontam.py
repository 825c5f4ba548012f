"""False positives of identity-based decontamination on ordinary repositories, and what each layer catches.

Reads ordinary repositories (default: this repository's own tree and history, and the demo's sample data)
through the real readers, runs the decontamination step with every layer on, and prints per input how many
documents were dropped (the false-positive rate: none of them is a benchmark repository) and how their
identity was established. With --cases it also runs each benchmark case (a directory or clone) once per
layer alone and prints the case x layer table.

    .venv/bin/python bench/bench_decontam.py
    .venv/bin/python bench/bench_decontam.py --index bench_index.json.gz --ordinary ~/src/a ~/src/b \
        --cases mirror=~/mirrors/tablekit tarball=~/tmp/benchlib-1.4.0-src
    .venv/bin/python bench/bench_decontam.py --json -      # the figures as JSON instead of the table
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from midtrain.curate.base import Drop  # noqa: E402
from midtrain.curate.decontam import DecontamConfig, SweBenchRepoFilter  # noqa: E402
from midtrain.sources.commits import CommitReader, CommitsConfig  # noqa: E402
from midtrain.sources.git import is_git_repo  # noqa: E402
from midtrain.sources.pulls import PullReader  # noqa: E402
from midtrain.sources.repos import RepoReader  # noqa: E402
from midtrain.sources.traces import TraceReader  # noqa: E402

LAYERS = {  # each layer alone (name matching always runs: it is the step's first check); the index's
    # repository names and root commits are known to every layer, its content only to "content"
    "name": dict(root_commits=False, declared_homes=False),
    "root_commit": dict(root_commits=True, declared_homes=False),
    "declared": dict(root_commits=False, declared_homes=True),
    "content": dict(root_commits=False, declared_homes=False),
}


def documents(path: Path) -> list:
    docs = []
    if path.suffix in (".jsonl", ".json") or path.name.endswith(".jsonl.gz"):
        reader = PullReader([str(path)]) if "pr" in path.name else TraceReader([str(path)])
        return list(reader.run())
    if path.is_dir() and not is_git_repo(path) and any(path.glob("*.traj*")):
        return list(TraceReader([str(path)]).run())
    docs += list(RepoReader([str(path)]).run())
    if is_git_repo(path):
        # one document per commit (as small as documents go), so the rate is per commit
        docs += list(CommitReader([str(path)], CommitsConfig(max_doc_bytes=1024)).run())
    return docs


def run(step: SweBenchRepoFilter, docs: list) -> tuple[Counter, Counter]:
    outcome: Counter[str] = Counter()
    identity: Counter[str] = Counter()
    for doc in docs:
        before = len(doc.metadata.get("files") or [])
        try:
            step.process(doc)
            outcome["kept"] += 1
            outcome["files_removed"] += before - len(doc.metadata.get("files") or [])
        except Drop as d:
            outcome[d.reason] += 1
        ident = doc.metadata.get("identity")
        if ident:
            identity[ident["method"]] += 1
    return outcome, identity


def main(argv: list[str] | None = None) -> int:
    from figures import bench_parser

    p = bench_parser(__doc__)
    p.add_argument("--index", default=str(ROOT / "tests/data/decontam/bench_index.json"))
    p.add_argument(
        "--ordinary",
        nargs="*",
        type=Path,
        default=[
            ROOT,
            ROOT / "data_prep/samples/repo",
            ROOT / "data_prep/samples/pulls/sample_prs.jsonl",
            ROOT / "data_prep/samples/traces",
        ],
    )
    p.add_argument("--cases", nargs="*", default=[], metavar="NAME=PATH")
    args = p.parse_args(argv)
    if args.smoke:  # the samples only: this checkout's tree and history are the slow part
        args.ordinary = [ROOT / "data_prep/samples/repo", ROOT / "data_prep/samples/pulls/sample_prs.jsonl"]

    rows: list[dict[str, Any]] = []
    total, dropped, files_total, files_cut = 0, 0, 0, 0
    for path in args.ordinary:
        step = SweBenchRepoFilter(DecontamConfig(index=args.index))
        docs = documents(path)
        outcome, identity = run(step, docs)
        n_drop = sum(v for k, v in outcome.items() if k not in ("kept", "files_removed"))
        total, dropped = total + len(docs), dropped + n_drop
        files_total += sum(len(d.metadata.get("files") or []) for d in docs) + outcome["files_removed"]
        files_cut += outcome["files_removed"]
        rows.append(
            {
                "input": str(path),
                "documents": len(docs),
                "dropped": n_drop,
                "outcome": dict(outcome),
                "identity": dict(identity),
            }
        )
    table = []
    for case in args.cases:
        name, _, path = case.partition("=")
        docs_by_layer = {}
        for layer, over in LAYERS.items():
            cfg = DecontamConfig(**({"index": args.index} | over))
            step = SweBenchRepoFilter(cfg)
            if layer != "content":
                step._idx()
                step._content = None  # names and root commits from the index, no content matching
            outcome, _ = run(step, documents(Path(path).expanduser()))
            reasons = sorted(k for k in outcome if k not in ("kept", "files_removed"))
            if outcome["files_removed"]:
                reasons.append(f"{outcome['files_removed']} files cut")
            docs_by_layer[layer] = ",".join(reasons) or "-"
        table.append({"case": name, **docs_by_layer})
    result = {
        "ordinary": rows,
        "false_positive_rate": dropped / max(total, 1),
        "documents": total,
        "dropped": dropped,
        "files": files_total,
        "files_cut": files_cut,
        "cases": table,
    }
    if args.json == "-":
        print(json.dumps(result, indent=2))
        return 0
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print("ordinary input                                    docs  dropped  files cut  identity")
    for r in rows:
        print(
            f"{r['input'][-48:]:48s} {r['documents']:5d} {r['dropped']:8d} {r['outcome'].get('files_removed', 0):10d}"
            f"  {r['identity']}"
        )
    print(
        f"false-positive rate: documents {dropped}/{total} = {result['false_positive_rate']:.4f}, "
        f"repository files cut {files_cut}/{files_total}"
    )
    if table:
        print("\ncase x layer (reason when that layer alone drops it, - when it does not)")
        print(f"{'case':20s} " + " ".join(f"{k:22s}" for k in LAYERS))
        for t in table:
            print(f"{t['case']:20s} " + " ".join(f"{t[k]:22s}" for k in LAYERS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
