"""Source quality on real repositories: what a reviewer of the training mixture checks first.

  order      forward module-level imports (a file placed before a file it imports) and tests/examples placed
             before library code they import, for Python package trees (this repository, packages of .venv);
  commits    share of commit tokens in lock/SVG/data/binary/generated/minified file sections (judged by the
             repository filters) and the reader's skip counts, for git histories;
  pieces     where the continuation pieces of split commit documents start (commit / diff --git header vs
             mid-hunk) at a given sequence length;
  redaction  findings in test files and on assertion lines (each should be a real secret, not a fixture).

    .venv/bin/python bench/bench_source_quality.py [--trees DIR ...] [--histories REPO ...] [--seq-length 32768]

Defaults: this repository (tree and history) and a few packages from the virtual environment.
"""

from __future__ import annotations

import json
import os
import re
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from midtrain.curate.secrets import Redactor  # noqa: E402
from midtrain.formats.repo_files import file_group  # noqa: E402
from midtrain.pack.pack_step import PackConfig  # noqa: E402
from midtrain.pack.packer import split_points  # noqa: E402
from midtrain.sources.commits import CommitReader, CommitsConfig, file_skip_reason  # noqa: E402
from midtrain.sources.ordering import dependency_order, file_dependencies, forward_imports  # noqa: E402
from midtrain.sources.repos import is_doc_path  # noqa: E402

_ASSERT = re.compile(r"\bassert|\bexpect\(|self\.fail|pytest\.raises")


def _tree_files(root: Path, suffixes: tuple[str, ...]) -> dict[str, str]:
    base = root.parent if root.parent.name == "site-packages" else root  # keep a package's own name
    files = {}
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__", ".venv", "node_modules")]
        for n in names:
            p = Path(dirpath) / n
            if n.endswith(suffixes):
                try:
                    files[p.relative_to(base).as_posix()] = p.read_text()
                except (UnicodeDecodeError, OSError):
                    pass
    return files


def order_report(tree: Path) -> str:
    files = {p: t for p, t in _tree_files(tree, (".py",)).items() if not is_doc_path(p)}
    deps = file_dependencies(files)
    order = dependency_order(files)
    fwd, edges = forward_imports(order, deps)
    pos = {p: i for i, p in enumerate(order)}
    early = sum(1 for p, ds in deps.items() for q in ds if file_group(p) > 0 and file_group(q) == 0 and pos[p] < pos[q])
    return f"{tree}: {len(files)} files, forward imports {fwd}/{edges}, tests/examples before code they import {early}"


def commits_report(repo: Path, tok, max_commits: int = 0) -> str:
    reader = CommitReader([str(repo)], CommitsConfig(max_commits=max_commits))
    by: Counter = Counter()
    for doc in reader.run():
        for sec in re.split(r"(?m)^(?=commit [0-9a-f]{12}\n|diff --git )", doc.text):
            n = len(tok(sec, add_special_tokens=False)["input_ids"]) if sec else 0
            by[(file_skip_reason(sec) or "kept") if sec.startswith("diff --git") else "message/header"] += n
    total = sum(by.values()) or 1
    skips = {k: v.total for k, v in reader.stats.stats.items() if k.startswith("skip/")}
    shares = ", ".join(f"{k} {v / total:.2%}" for k, v in by.most_common())
    return f"{repo}: {total} tokens; {shares}\n    skips {skips}"


def pieces_report(repo: Path, tok, seq_length: int, max_commits: int = 0) -> str:
    pattern = re.compile(PackConfig().boundaries["commit"], re.MULTILINE)
    at_header = pieces = 0
    for doc in CommitReader([str(repo)], CommitsConfig(max_commits=max_commits)).run():
        enc = tok(doc.text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        if len(ids) <= seq_length:
            continue
        starts = np.array([o[0] for o in offsets])
        newline = np.flatnonzero(np.array(["\n" in tok.decode([i]) for i in ids])) + 1
        bounds = sorted({int(np.searchsorted(starts, m.start())) for m in pattern.finditer(doc.text) if m.start()})
        for cut in split_points(len(ids), seq_length, bounds, newline)[:-1]:
            ch = offsets[cut][0]
            at_header += doc.text.startswith(("commit ", "diff --git "), ch)
            pieces += 1
    return f"{repo}: {at_header}/{pieces} continuation pieces start at a commit or diff --git header"


def redaction_report(tree: Path) -> str:
    redactor = Redactor()
    kinds: Counter = Counter()
    in_tests = on_asserts = 0
    suffixes = (".py", ".md", ".txt", ".json", ".yaml", ".yml", ".toml", ".cfg", ".sh")
    for path, text in _tree_files(tree, suffixes).items():
        doc = f"<|file_sep|>{path}\n{text}"  # as in a repository document: test files are known by path
        for f in redactor.find(doc):
            kinds[f.kind] += 1
            if file_group(path) == 1:
                in_tests += 1
                end = doc.find("\n", f.end)
                line = doc[doc.rfind("\n", 0, f.start) + 1 : end if end >= 0 else len(doc)]
                on_asserts += bool(_ASSERT.search(line))
    return f"{tree}: findings {dict(kinds)}; in test files {in_tests}; on assertion lines {on_asserts}"


def main(argv: list[str] | None = None) -> int:
    site = Path(sysconfig.get_paths()["purelib"])
    from figures import bench_parser

    ap = bench_parser(__doc__)
    ap.add_argument(
        "--trees",
        nargs="*",
        type=Path,
        default=[ROOT] + [site / p for p in ("jinja2", "fsspec", "aiohttp", "datatrove") if (site / p).is_dir()],
    )
    ap.add_argument("--histories", nargs="*", type=Path, default=[ROOT])
    ap.add_argument("--seq-length", type=int, default=32768)
    ap.add_argument("--max-commits", type=int, default=0, help="newest commits read per history (0: all)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.trees, args.max_commits, args.seq_length = [ROOT / "data_prep/samples/repo"], 5, 2048
    from midtrain.formats.tokenizer import load_tokenizer

    tok = load_tokenizer()
    reports: dict[str, dict[str, str]] = {"order": {}, "commits": {}, "pieces": {}, "redaction": {}}
    print("== repository order (module-level import graph)")
    for t in args.trees:
        reports["order"][str(t)] = order_report(t)
        print("  " + reports["order"][str(t)])
    print("== commit composition (tokens by file filter verdict)")
    for r in args.histories:
        reports["commits"][str(r)] = commits_report(r, tok, args.max_commits)
        print("  " + reports["commits"][str(r)])
    print(f"== split commit documents (seq_length {args.seq_length})")
    for r in args.histories:
        reports["pieces"][str(r)] = pieces_report(r, tok, args.seq_length, args.max_commits)
        print("  " + reports["pieces"][str(r)])
    print("== redaction on real code")
    for t in args.trees:
        reports["redaction"][str(t)] = redaction_report(t)
        print("  " + reports["redaction"][str(t)])
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
