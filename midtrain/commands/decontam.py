"""Build the content index decontamination uses: `midtrain decontam index CLONE_OR_DIR... --output INDEX`.

Run it where the benchmark repositories can be cloned (a cluster login node), then give the index to prep
with `decontam.index=INDEX`. Each input is a git clone (the tree at HEAD is read, and the root commits of its
history are recorded) or a plain directory (a release tarball unpacked); its benchmark name comes from
`owner/name=PATH`, else from the clone's origin remote. Every file is fingerprinted by its normalised text
(see midtrain/curate/fingerprint.py); binary files and files that identify nothing (short, license texts)
are left out.

Building the full index for SWE-bench (Verified, Lite, Multilingual, Pro) on a cluster:

  for r in $(grep -v '^#' midtrain/curate/data/swebench_repos.txt); do
      git clone --quiet https://github.com/$r clones/${r/\\//__}; done
  midtrain decontam index clones/* --output bench_index.json.gz
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from midtrain.curate.fingerprint import MIN_CHARS, ContentIndex, RepoPrint, repo_prints
from midtrain.sources.git import GitError, head_commit, is_git_repo, list_tree, read_blobs, remote_name, root_commits

EPILOG = """examples:
  midtrain decontam index benchorg/benchlib=tests/data/decontam/benchorg__benchlib --output /tmp/bench_index.json.gz
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = sub.add_parser(
        "index",
        help="fingerprint benchmark repositories' files into an index for prep",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    q.add_argument(
        "inputs",
        nargs="+",
        metavar="[OWNER/NAME=]CLONE_OR_DIR",
        help="git clones or plain directories of benchmark repositories",
    )
    q.add_argument("--output", "-o", required=True, metavar="INDEX", help="index file (.json or .json.gz)")
    q.add_argument(
        "--min-chars", type=int, default=None, help="shortest normalised file that gets a fingerprint (default 200)"
    )
    q.add_argument(
        "--no-minhash",
        action="store_true",
        help="exact fingerprints only (no near-duplicate band keys: a smaller index)",
    )


def _split_input(arg: str) -> tuple[str | None, Path]:
    """'owner/name=path' -> ('owner/name', path); 'path' -> (None, path)."""
    name, sep, path = arg.partition("=")
    if sep and "/" in name and not Path(arg).exists():
        return name, Path(path)
    return None, Path(arg)


def _dir_files(root: Path) -> Iterator[tuple[str, bytes]]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for fn in sorted(filenames):
            full = Path(dirpath) / fn
            if full.is_symlink() or not full.is_file():
                continue
            yield full.relative_to(root).as_posix(), full.read_bytes()


def _git_files(root: Path) -> Iterator[tuple[str, bytes]]:

    # size -1: a blob the clone does not have (a partial or damaged clone): nothing to fingerprint
    entries = [e for e in list_tree(root) if e.mode in ("100644", "100755") and e.size >= 0]
    by_sha: dict[str, list[str]] = {}
    for e in entries:
        by_sha.setdefault(e.sha, []).append(e.path)
    for sha, data in read_blobs(root, sorted(by_sha)):
        for path in by_sha[sha]:
            yield path, data


def _texts(files: Iterator[tuple[str, bytes]]) -> Iterator[tuple[str, str]]:
    for path, data in files:
        if b"\0" in data[:8192]:
            continue  # binary
        try:
            yield path, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def run(args: argparse.Namespace) -> int:
    # lazy: loads datatrove only when this runs
    from midtrain.curate.decontam import normalize_repo

    min_chars = args.min_chars if args.min_chars is not None else MIN_CHARS
    if min_chars < 1:
        print("midtrain decontam index: --min-chars must be >= 1", file=sys.stderr)
        return 2
    index = ContentIndex(min_chars=min_chars)
    for arg in args.inputs:
        name, root = _split_input(arg)
        if not root.is_dir():
            print(f"midtrain decontam index: {root}: not a directory or git clone", file=sys.stderr)
            return 1
        git = is_git_repo(root)
        name = name or (remote_name(root) if git else None)
        repo = normalize_repo(name) if name else None
        if repo is None:
            print(
                f"midtrain decontam index: {root}: cannot tell which repository this is; write it as owner/name={root}",
                file=sys.stderr,
            )
            return 1
        try:
            head = head_commit(root) if git else None
            roots = root_commits(root) if git else []
            paths, hashes, bands = repo_prints(
                _texts(_git_files(root) if git else _dir_files(root)), min_chars, near=not args.no_minhash
            )
        except (GitError, OSError) as e:
            print(f"midtrain decontam index: {root}: {e}", file=sys.stderr)
            return 1
        if repo in index.repos:  # the same repository twice (two checkouts): one entry with both
            old = index.repos[repo]
            paths, hashes = sorted(set(paths) | set(old.paths)), sorted(set(hashes) | set(old.hashes))
            roots = sorted(set(roots) | set(old.root_commits))
            bands = [list(b) for b in sorted({tuple(b) for b in bands} | {tuple(b) for b in old.bands})]
        index.add(repo, RepoPrint(str(root), head, roots, paths, hashes, [list(b) for b in bands]))
        print(f"{repo}: {len(hashes)} fingerprints of {len(paths)} files, {len(roots)} root commits ({root})")
    index.save(args.output)
    print(
        json.dumps(
            {
                "index": str(args.output),
                "repos": len(index.repos),
                "fingerprints": len(index.by_hash),
                "root_commits": len(index.roots),
            }
        )
    )
    return 0
