"""What the files read at the base commit buy a pull-request document, and what they cost.

For the merged pull requests of a git repository (its merge commits, as ``midtrain prep pulls`` reads a git
input), each ``pulls.context`` mode and token budget: tokens spent on the read files and on the edits (the
Qwen3 tokenizer `midtrain pack` uses, beside the reader's byte estimate), and the share of the names an edit
uses (identifiers on its Python diff lines, keywords and builtins left out) that the read files show, i.e.
how much of what the engineer had to know the document gives before the edit, and the share of the changed
library files (source, not tests) shown before their edit, whole or as windows around the edited hunks.
It also prints the PRs found by kind (merge, squash ...) and, with ``--dedup``, how many PRs of each mode
the prep's curation (exact and MinHash dedup included) keeps.

    .venv/bin/python bench/bench_pull_context.py [REPO] [--prs 150] [--dedup] [--json out.json]

Without REPO (as `make bench` runs it) it measures a small generated repository: the demo's sample project
with a few pull requests merged through GitHub's merge button; its figures only show the bench runs.
Each setting also prints the context tokens by category (the file tree, changed source, tests, other files,
changelogs, what the changed files import and their tests) and the PRs kept of those measured, by kind.

Figures on pallets/jinja (a bare mirror of its history, HEAD 2026; no test names it), --prs 400 --dedup:
613 PRs found (462 merge-button merges, 98 merges titled 'Title (#N)', 53 squash merges; 1 repeated number);
of the last 400, 115 are bots' (dependabot, pre-commit.ci) and 285 rendered; curation keeps 282 in every mode
(merge 208/276, merge_titled 56/98, squash 18/26 kept/measured). Changed library files shown before their edit:
files@16K 68% (67% without the tree), files+imports 57/66/68/71% at 4K/8K/16K/32K; per PR, files@16K shows
93% on average and all of them in 178 of 206 PRs (the misses are mass changes: the src/ layout move, 14 of 45).
Names the edit uses shown: 87% (files@16K), 78/83/87/89% (files+imports). The tree costs 8% of the context
tokens at files@16K (median context 9.9K vs 9.6K without it); at 16K files+imports the context is tree 7%,
changed source 44%, tests 12%, other 6%, changelogs 5%, imports and their tests 26%.

The default settings as prep reads them (one reader, PRs in turn; "forms" in --json), on pallets/click (a bare
mirror fetched 2026-12, HEAD's history and branches main, stable, parser-rewrite-1), --prs 250: 1,051 PRs found
(597 merge-button, 360 titled merges, 94 squash); of the last 250, 132 kept (95 change no code, 23 sync PRs);
document form median 6.9K tokens per PR (mean 8.4K), bytes: tree 9%, changed source 35%, tests 20%, other 6%,
changelogs 2.6%, edits 27%; read-file lines an earlier document already showed 43% of the bytes (windows of
the same modules overlap); the agent form median 5.6K tokens (mean 7.3K). The leak scan finds 0 in either
form (and 0 over all 599 documents of its whole history).
"""

from __future__ import annotations

import argparse
import builtins
import gzip
import json
import keyword
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from midtrain.formats.tokenizer import default_tokenizer_path, load_tokenizer
from midtrain.sources.privacy import find_leaks
from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pull_context import BYTES_PER_TOKEN, clone_name, history_pulls, relevance
from midtrain.sources.pulls import PullReader

_NAME = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{2,}\b")
COMMON = set(keyword.kwlist) | set(dir(builtins)) | {"self", "cls"}
# (pulls.context, context_tokens, tree_tokens): the file tree's cost shown by files@16K without it
SETTINGS = [
    ("none", 16_384, 1_024),
    ("files", 16_384, 0),
    ("files", 16_384, 1_024),
    ("files+imports", 4_096, 1_024),
    ("files+imports", 8_192, 1_024),
    ("files+imports", 16_384, 1_024),
    ("files+imports", 32_768, 1_024),
]
_READ = re.compile(r"^\[read at base commit \w+: (\S+) \((.*)\)\]$", re.MULTILINE)
CATEGORIES = ("tree", "changed source", "changed tests", "changed other", "changelogs", "imports and their tests")


def context_parts(context: str) -> dict[str, str]:
    """The read-at-base part of a document (its ``context_span``) split into :data:`CATEGORIES`."""
    parts = dict.fromkeys(CATEGORIES, "")
    heads = list(_READ.finditer(context))
    parts["tree"] = context[: heads[0].start()] if heads else context
    for m, nxt in zip(heads, heads[1:] + [None]):
        block = context[m.start() : nxt.start() if nxt else len(context)]
        why = m.group(2)
        if not why.startswith("changed"):
            cat = "imports and their tests"
        else:
            cat = ("changed source", "changed tests", "changed other", "changelogs")[relevance(m.group(1))]
        parts[cat] += block
    return parts


def edit_names(rec: dict) -> set[str]:
    """Identifiers on the diff lines of the PR's Python files (what the edit touches and uses)."""
    names: set[str] = set()
    for f in rec.get("files") or []:
        if str(f.get("filename", "")).endswith(".py"):
            for line in (f.get("patch") or "").splitlines():
                if line[:1] in "+- " and not line.startswith(("+++", "---")):
                    names.update(n for n in _NAME.findall(line[1:]) if n not in COMMON)
    return names


def sample_repo(out: Path, prs: int) -> Path:
    """data_prep/samples/repo as a git repository with ``prs`` pull requests merged (``Merge pull request #N``):
    each adds a function to minicalc/ops.py that uses names of minicalc/errors.py."""
    from midtrain.demo.inputs import NOT_SAMPLES, SAMPLES

    shutil.copytree(SAMPLES / "repo", out, ignore=NOT_SAMPLES)
    env = {
        "GIT_AUTHOR_NAME": "Ada",
        "GIT_AUTHOR_EMAIL": "ada@example.org",
        "GIT_COMMITTER_NAME": "Ada",
        "GIT_COMMITTER_EMAIL": "ada@example.org",
        "PATH": "/usr/bin:/bin",
        "HOME": str(out),
    }

    def git(*a: str) -> None:
        subprocess.run(["git", "-C", str(out), *a], check=True, capture_output=True, env=env)

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "initial import")
    for n in range(1, prs + 1):
        git("checkout", "-q", "-b", f"fix-{n}")
        ops = out / "minicalc" / "ops.py"
        ops.write_text(
            ops.read_text() + f"\n\ndef checked_{n}(value):\n    if value is None:\n"
            f"        raise CalcError('checked_{n}: no value')\n    return value\n"
        )
        git("commit", "-q", "-am", f"ops: checked_{n}")
        git("checkout", "-q", "main")
        git(
            "merge", "-q", "--no-ff", f"fix-{n}", "-m", f"Merge pull request #{n} from octo/fix-{n}\n\nops: checked_{n}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from figures import bench_parser

    ap = bench_parser(__doc__)
    ap.add_argument("repo", nargs="?", help="a git repository with merged pull requests (default: a generated one)")
    ap.add_argument("--prs", type=int, default=150, help="the most recent N merged pull requests")
    ap.add_argument("--dedup", action="store_true", help="also run the curation on each mode's documents")
    args = ap.parse_args(argv)
    if args.smoke:
        args.prs = 3
    with tempfile.TemporaryDirectory(prefix="bench_pull_context_") as tmp:
        repo = Path(args.repo) if args.repo else sample_repo(Path(tmp) / "sample", min(args.prs, 8))
        return measure(ap, args, repo)


def measure(ap: argparse.ArgumentParser, args: argparse.Namespace, repo: Path) -> int:
    found: dict[str, int] = {}
    records = list(history_pulls(repo, clone_name(repo), found))[-args.prs :]
    if not records:
        ap.error(f"{repo}: no merged pull requests (merge commits) to measure")
    print(
        f"PRs found: {sum(v for k, v in found.items() if k != 'repeated_number')} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(found.items()))}); measuring the last {len(records)}"
    )
    tok = load_tokenizer(default_tokenizer_path())
    kinds = {
        f"pr:{rec['repo'] or rec.get('clone') or 'unknown'}#{rec['number']}": rec["found_as"] for _, rec in records
    }
    measured = {k: sum(v == k for v in kinds.values()) for k in sorted(set(kinds.values()))}
    rows = []
    for mode, budget, tree_tokens in SETTINGS:
        reader = PullReader([str(repo)], PullsConfig(context=mode, context_tokens=budget, tree_tokens=tree_tokens))
        ctx_tok, edit_tok, doc_tok, cover, est_err, secs = [], [], [], [], [], []
        lib_shown, lib_changed, docs = 0, 0, []
        by_cat = dict.fromkeys(CATEGORIES, 0)
        for where, rec in records:
            t0 = time.perf_counter()
            doc = reader.render(rec, where, repo)
            secs.append(time.perf_counter() - t0)
            if doc is None:
                continue
            docs.append(doc)
            text, meta = doc.text, doc.metadata
            lib = [
                f["filename"]
                for f in rec.get("files") or []
                if str(f.get("filename", "")).endswith(".py")
                and relevance(f["filename"]) == 0
                and f.get("status") != "added"
            ]
            lib_changed += len(lib)
            lib_shown += len(set(lib) & set(meta.get("context_files") or []))
            raw = text.encode()
            eb = meta.get("edit_bytes", 0)
            start, end = meta.get("context_span") or (0, 0)
            ctx_text = text[start:end]
            n_ctx = 0
            for cat, part in context_parts(ctx_text).items() if ctx_text else ():
                n = len(tok.encode(part)) if part else 0
                by_cat[cat] += n
                n_ctx += n
            ctx_tok.append(n_ctx)
            doc_tok.append(len(tok.encode(text)))
            edit_tok.append(round(eb * doc_tok[-1] / len(raw)))
            if n_ctx:
                est_err.append((len(ctx_text.encode()) / BYTES_PER_TOKEN) / n_ctx - 1)
            names = edit_names(rec)
            if names:
                seen = set(_NAME.findall(ctx_text))
                cover.append(len(names & seen) / len(names))
        row = {
            "context": mode,
            "context_tokens": budget,
            "tree_tokens": tree_tokens,
            "prs": len(doc_tok),
            "context_tokens_median": statistics.median(ctx_tok),
            "context_tokens_mean": statistics.mean(ctx_tok),
            "over_budget": sum(n > budget for n in ctx_tok) if mode != "none" else 0,
            "edit_tokens_median": statistics.median(edit_tok),
            "context_share": sum(ctx_tok) / sum(doc_tok),
            "name_coverage_mean": statistics.mean(cover),
            "estimate_error_mean": statistics.mean(est_err) if est_err else 0.0,
            "library_files_shown": lib_shown / lib_changed if lib_changed else 0.0,
            "seconds_per_pr": statistics.mean(secs),
            "context_tokens_by_category": {k: v / max(1, sum(by_cat.values())) for k, v in by_cat.items()},
            "rendered_by_kind": _by_kind([d.id for d in docs], kinds),
        }
        if args.dedup:
            row["kept_by_kind"] = _by_kind(curated(docs), kinds)
            row["kept_after_curation"] = sum(row["kept_by_kind"].values())
        rows.append(row)
        print(
            f"{mode:14s} {budget:>6,} tok{'' if tree_tokens else ', no tree'}: context median "
            f"{row['context_tokens_median']:>7,.0f} "
            f"(share {row['context_share']:.0%}, real > budget: {row['over_budget']}), edits median "
            f"{row['edit_tokens_median']:>6,.0f}, names the edit uses shown before it "
            f"{row['name_coverage_mean']:.0%}, changed library files shown {row['library_files_shown']:.0%}"
            + (f", kept {row['kept_after_curation']}/{len(doc_tok)} after curation" if args.dedup else "")
            + f", byte estimate {row['estimate_error_mean']:+.0%} vs tokenizer, "
            f"{row['seconds_per_pr']:.2f} s/PR",
            flush=True,
        )
        if mode != "none" or tree_tokens:
            shares = row["context_tokens_by_category"]
            print("    context tokens: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items() if v), flush=True)
        kept = row.get("kept_by_kind") or row["rendered_by_kind"]
        print(
            f"    PRs {'kept after curation' if args.dedup else 'rendered (after bot authors)'} / measured, by kind: "
            + ", ".join(f"{k} {kept.get(k, 0)}/{n}" for k, n in measured.items()),
            flush=True,
        )
    forms = pipeline_figures(repo, records, tok)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "repo": args.repo or "generated sample",
                    "prs": len(records),
                    "found": found,
                    "measured_by_kind": measured,
                    "forms": forms,
                    "settings": {
                        f"{r['context']}@{r['context_tokens']}" + ("" if r["tree_tokens"] else "-notree"): r
                        for r in rows
                    },
                },
                indent=1,
            )
        )
    return 0


def pipeline_figures(repo: Path, records: list, tok) -> dict:
    """The default settings, PRs read in turn by one reader as `prep` reads them (so a file shown whole in
    earlier documents is windowed later, each commit shown once): PRs kept and dropped by reason, the bytes of
    each block, the bytes of read-file lines an earlier document already showed, the changelogs' share; and
    the agent form's tokens per PR beside the document form's."""
    out: dict = {}
    for form in ("document", "agent"):
        reader = PullReader([str(repo)], PullsConfig(render=form))
        docs = [d for where, rec in records if (d := reader.render(rec, where, repo)) is not None]
        stats = {k: v.total for k, v in reader.stats.stats.items()}
        tokens = [len(tok.encode(d.text)) for d in docs]
        leaks: dict[str, int] = {}
        for d in docs:  # what the anonymisation must have replaced, outside code and the read files
            for kind, _ in find_leaks(d.text, skip_spans=[tuple(d.metadata.get("context_span") or (0, 0))]):
                leaks[kind] = leaks.get(kind, 0) + 1
        row: dict[str, Any] = {
            "kept": len(docs),
            "leaks": leaks,
            "dropped": {k.split("/", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("dropped/")},
            "tokens_per_pr_median": statistics.median(tokens) if tokens else 0,
            "tokens_per_pr_mean": statistics.mean(tokens) if tokens else 0,
        }
        if form == "document":
            blocks = dict.fromkeys((*CATEGORIES, "edits", "rest"), 0)
            seen: set[tuple[str, str]] = set()
            repeated = 0
            for d in docs:
                start, end = d.metadata.get("context_span") or (0, 0)
                ctx = d.text[start:end]
                for cat, part in context_parts(ctx).items() if ctx else ():
                    blocks[cat] += len(part.encode())
                for m, nxt in zip(heads := list(_READ.finditer(ctx)), [*heads[1:], None]):
                    for line in ctx[m.end() : nxt.start() if nxt else len(ctx)].split("\n"):
                        if line.strip() and line != "...":
                            key = (m.group(1), line)
                            repeated += len(line.encode()) + 1 if key in seen else 0
                            seen.add(key)
                blocks["edits"] += d.metadata.get("edit_bytes", 0)
                blocks["rest"] += len(d.text.encode()) - len(ctx.encode()) - d.metadata.get("edit_bytes", 0)
            total = sum(blocks.values()) or 1
            row |= {
                "bytes_by_block": blocks,
                "read_lines_repeated_share": repeated / total,
                "changelog_share": blocks["changelogs"] / total,
            }
        out[form] = row
        print(
            f"{form:8s} form: {len(docs)} kept of {len(records)} "
            f"(dropped: {', '.join(f'{k} {v}' for k, v in row['dropped'].items()) or 'none'}), tokens per PR median "
            f"{row['tokens_per_pr_median']:,.0f} mean {row['tokens_per_pr_mean']:,.0f}, leaks found "
            f"{sum(leaks.values())}"
            + (
                f"; read-file lines an earlier PR showed {row['read_lines_repeated_share']:.0%} of bytes, "
                f"changelogs {row['changelog_share']:.1%}; bytes by block: "
                + ", ".join(f"{k} {v / total:.0%}" for k, v in row["bytes_by_block"].items())
                if form == "document"
                else ""
            ),
            flush=True,
        )
    return out


def _by_kind(ids: list[str], kinds: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in ids:
        out[kinds.get(i, "?")] = out.get(kinds.get(i, "?"), 0) + 1
    return out


def curated(docs: list) -> list[str]:
    """The ids of the ``docs`` the prep's curation stages (filters, exact and MinHash dedup) keep."""
    from midtrain.curate.stages import CurationConfig, curation_stages
    from midtrain.runner import StageChain

    with tempfile.TemporaryDirectory(prefix="bench_pull_curate_") as tmp:
        raw = Path(tmp) / "raw"
        raw.mkdir()
        with open(raw / "00000.jsonl", "w") as f:
            for d in docs:
                f.write(json.dumps({"text": d.text, "id": d.id, "metadata": d.metadata}) + "\n")
        out = Path(tmp) / "prep"
        chain = StageChain(label="bench curate pulls")
        for st in curation_stages(CurationConfig(), "pulls", str(raw), str(out / "documents"), str(out / "work"), 1):
            chain.add(st.name, st.pipeline, st.tasks or 1, str(out / "work" / "logs" / st.name), job_name=st.name)
        chain.run()
        return [
            json.loads(line)["id"]
            for g in (out / "documents").rglob("*.jsonl.gz")
            for line in gzip.open(g, "rt")
            if line.strip()
        ]


if __name__ == "__main__":
    raise SystemExit(main())
