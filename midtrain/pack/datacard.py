"""The data card of a `midtrain prep` output (and of packed shards): what the data is made of.

Composition a reviewer asks for, from the documents themselves and the prep's stats.json: tokens by source,
by language and by file kind (code, docs, tests, config, lock, data) - repository documents split by their
file headers, commit documents by their per-file diffs - the top repositories, skipped/removed/redacted
counts by reason (stats.json, plus the paths the readers listed in ``removed_files``), the share of tokens
from bot commits, and document length histograms. Written as datacard.md, datacard.json and datacard.png.

Tokens are exact where the prep has been tokenized by `midtrain pack` (PREP_DIR/tokenized/*/...docs.jsonl
holds every document's token count); otherwise they are estimated from UTF-8 bytes (``BYTES_PER_TOKEN``) and
the card says so. A document's token count is shared among its files in proportion to their bytes.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

from midtrain.formats.documents import document_files, read_jsonl
from midtrain.formats.repo_files import file_group
from midtrain.locations import as_path, local_folder
from midtrain.sources.filters import DATA_EXT, path_skip_reason
from midtrain.sources.repos import is_doc_path, language_of

BYTES_PER_TOKEN = 3.6  # typical of code with a 150K-vocabulary BPE tokenizer (Qwen): an estimate only
TOP_REPOS = 20
LENGTH_EDGES = [0, 256, 1024, 4096, 16384, 65536, 262144, 1048576]
CONFIG_EXT = (".toml", ".yaml", ".yml", ".json", ".ini", ".cfg", ".conf", ".env", ".properties", ".xml")
CONFIG_NAMES = {
    "Makefile",
    "Dockerfile",
    "CMakeLists.txt",
    "setup.cfg",
    "tox.ini",
    ".gitignore",
    ".gitattributes",
    ".editorconfig",
    ".pre-commit-config.yaml",
    "MANIFEST.in",
    "LICENSE",
    "COPYING",
}
_DIFF_FILE = re.compile(r"^diff --git a/(.*?) b/(.*)$", re.MULTILINE)
_COMMIT_HEAD = re.compile(r"^commit [0-9a-f]{12}$", re.MULTILINE)


def file_kind(path: str) -> str:
    """code | docs | tests | config | lock | data for one repository path."""
    name = posixpath.basename(path)
    reason = path_skip_reason(path)
    if reason == "lock_file":
        return "lock"
    if reason in ("svg", "data_file") or name.lower().endswith(DATA_EXT):
        return "data"
    if file_group(path) == 1:
        return "tests"
    if is_doc_path(path) or name.lower().endswith((".md", ".rst", ".txt", ".adoc")):
        return "docs"
    if name in CONFIG_NAMES or name.lower().endswith(CONFIG_EXT):
        return "config"
    return "code"


def _iter_documents(prep_dir: Path, skipped: Counter) -> Iterator[dict]:
    """The documents of PREP_DIR/documents/ (local files or objects in a bucket), read leniently: a line that
    is not a JSON object, or a file cut short, is logged and counted in ``skipped`` instead of ending the card."""
    for f in document_files(prep_dir / "documents", "*.jsonl*"):
        for _, row in read_jsonl(f, skipped):
            yield row


def _token_counts(prep_dir: Path) -> dict[str, int]:
    """Document id -> tokens, from the tokenize cache `midtrain pack` writes under PREP_DIR/tokenized/."""
    counts: dict[str, int] = {}
    for f in sorted((prep_dir / "tokenized").glob("*/*.docs.jsonl")):
        with f.open() as fh:
            for line in fh:
                row = json.loads(line)
                counts[row["id"]] = int(row["tokens"])
    return counts


def _parts(text: str, meta: dict) -> list[tuple[str | None, int]]:
    """(path or None, bytes) for each file of a document; None = text outside any file (headers, messages)."""
    files, offsets = meta.get("files"), meta.get("file_offsets")
    if isinstance(files, list) and isinstance(offsets, list) and len(files) == len(offsets) and files:
        ends = offsets[1:] + [len(text)]
        parts: list[tuple[str | None, int]] = [(None, len(text[: offsets[0]].encode()))]
        parts += [(p, len(text[a:b].encode())) for p, a, b in zip(files, offsets, ends)]
        return parts
    heads = list(_DIFF_FILE.finditer(text))
    if heads:
        cuts = sorted(
            [(m.start(), m.group(2)) for m in heads] + [(m.start(), None) for m in _COMMIT_HEAD.finditer(text)]
        )
        parts = [(None, len(text[: cuts[0][0]].encode()))]
        for (a, path), (b, _) in zip(cuts, cuts[1:] + [(len(text), None)]):
            parts.append((path, len(text[a:b].encode())))
        return parts
    return [(None, len(text.encode()))]


def _histogram(values: list[int]) -> list[int]:
    counts = [0] * len(LENGTH_EDGES)
    for v in values:
        i = max(k for k, e in enumerate(LENGTH_EDGES) if v >= e)
        counts[i] += 1
    return counts


def _pr_parts(meta: dict, tokens: float, per_byte: float) -> dict[str, float]:
    """A pull request's tokens: the files read at the base commit before the edits, the commits' messages and
    diffs, and the rest (issue, description, reviews), from the reader's ``context_bytes`` / ``edit_bytes``."""
    context = float(meta.get("context_bytes") or 0) * per_byte
    edits = float(meta.get("edit_bytes") or 0) * per_byte
    return {
        "context (files read at the base commit)": context,
        "edits (commits: messages and diffs)": edits,
        "issue, description, review, other": max(tokens - context - edits, 0.0),
    }


def _shares(c: Counter) -> dict[str, dict]:
    total = sum(c.values())
    return {k: {"tokens": round(v), "share": v / total} for k, v in c.items()} if total else {}


def prep_card(prep_dir: str | Path, top: int = TOP_REPOS) -> dict:
    """The data card of one `midtrain prep` output directory (a local path or a URL), as a JSON-able dict."""
    prep = as_path(prep_dir)
    if not (prep / "documents").is_dir():
        raise FileNotFoundError(f"{prep}: no documents/ folder (not a `midtrain prep` output)")
    exact = _token_counts(prep)
    by_source: Counter = Counter()
    by_language: Counter = Counter()  # fractional token shares: typeshed's Counter counts ints (ignores below)
    by_kind: Counter = Counter()
    by_repo: Counter = Counter()
    lengths: dict[str, list[int]] = defaultdict(list)
    removed: Counter = Counter()
    redacted: Counter = Counter()
    bot_tokens = 0.0
    pr_parts: Counter = Counter()
    docs = estimated = 0
    skipped: Counter = Counter()
    for d in _iter_documents(prep, skipped):
        meta, text = d.get("metadata") or {}, d.get("text") or ""
        src = str(meta.get("source") or "unknown")
        n_bytes = len(text.encode())
        if d.get("id") in exact:
            tokens = exact[d["id"]]
        else:
            tokens = round(n_bytes / BYTES_PER_TOKEN)
            estimated += 1
        docs += 1
        by_source[src] += tokens
        lengths[src].append(tokens)
        named = re.match(r"^(?:repo|commit):([^@#]+)", str(d.get("id") or ""))  # local inputs have no remote
        repo = meta.get("repo") or (named.group(1) if named else None)
        if repo:
            by_repo[repo] += tokens
        per_byte = tokens / n_bytes if n_bytes else 0.0
        for path, b in _parts(text, meta):
            share = b * per_byte
            if path is None:
                by_kind["commit message" if src == "commit" else "header" if src == "repo" else src] += share  # type: ignore[assignment]
                continue
            by_kind[file_kind(path)] += share  # type: ignore[assignment]
            by_language[language_of(path) or "other"] += share  # type: ignore[assignment]
        if src not in ("repo", "commit"):
            by_language["natural language / mixed"] += tokens
        for r in meta.get("removed_files") or []:
            removed[str(r.get("reason"))] += 1
        for kind, n in (meta.get("redactions") or {}).items():
            redacted[kind] += int(n)
        if meta.get("bot_bytes"):
            bot_tokens += meta["bot_bytes"] * per_byte
        if src == "pr":
            pr_parts.update(_pr_parts(meta, tokens, per_byte))
    stats_file = prep / "stats.json"
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
    total = sum(by_source.values())

    def table(c: Counter) -> dict[str, dict]:
        return {k: {"tokens": round(v), "share": v / total if total else 0.0} for k, v in c.most_common()}

    return {
        "prep_dir": str(prep),
        "documents": docs,
        **({"unreadable_records": dict(skipped)} if skipped else {}),
        "tokens": total,
        "tokens_exact": estimated == 0,
        "tokens_estimated_documents": estimated,
        "by_source": table(by_source),
        "by_language": table(by_language),
        "by_file_kind": table(by_kind),
        "top_repositories": table(Counter(dict(by_repo.most_common(top)))),
        "repositories": len(by_repo),
        "bot_share": bot_tokens / total if total else 0.0,
        "pull_request_parts": _shares(pr_parts),
        "removed_files_by_reason": dict(removed.most_common()),
        "redactions_by_kind": dict(redacted.most_common()),
        "skips": stats.get("skips", {}),
        "drops": stats.get("drops", {}),
        "changes": stats.get("changes", {}),
        "length_histogram_edges": LENGTH_EDGES,
        "length_histograms": {s: _histogram(v) for s, v in sorted(lengths.items())},
    }


def shards_card(shard_dir: str | Path, top: int = TOP_REPOS) -> dict:
    """Packed shards: tokens per source as packed (manifest), plus the card of every input prep directory."""
    # lazy: loads torch only when this runs
    from midtrain.formats.shard_reader import load_manifest

    m = load_manifest(shard_dir)
    inputs = []
    for p in m.get("inputs", []):
        path = as_path(p["path"] if isinstance(p, dict) else p)
        if (path / "documents").is_dir():
            inputs.append(prep_card(path, top))
    return {
        "shard_dir": str(shard_dir),
        "tokens": m["tokens"],
        "sequences": m["sequences"],
        "seq_length": m["seq_length"],
        "fill": m["fill"],
        "by_source": {
            k: {"tokens": s["tokens"], "share": s["tokens"] / m["tokens"] if m["tokens"] else 0.0}
            for k, s in m["sources"].items()
        },
        "inputs": inputs,
    }


def _md_table(title: str, rows: dict[str, dict]) -> list[str]:
    out = [f"### {title}", "", "| | tokens | share |", "|---|---:|---:|"]
    out += [f"| {k} | {v['tokens']:,} | {v['share']:.2%} |" for k, v in rows.items()]
    return out + [""]


def _md_counts(title: str, counts: dict[str, int]) -> list[str]:
    if not counts:
        return [f"### {title}", "", "none", ""]
    return (
        [f"### {title}", "", "| reason | count |", "|---|---:|"]
        + [f"| {k} | {v:,} |" for k, v in counts.items()]
        + [""]
    )


def to_markdown(card: dict) -> str:
    """The card as Markdown (what `midtrain inspect` prints and writes to datacard.md)."""
    if "shard_dir" in card:
        lines = [
            f"# Data card: {card['shard_dir']}",
            "",
            f"{card['sequences']:,} sequences x {card['seq_length']:,} tokens, fill {card['fill']:.2%}",
            "",
        ]
        lines += _md_table("Packed tokens by source (train)", card["by_source"])
        for c in card["inputs"]:
            lines += ["", to_markdown(c).replace("# Data card", "## Input")]
        return "\n".join(lines)
    how = (
        "exact (tokenized by `midtrain pack`)"
        if card["tokens_exact"]
        else f"estimated from bytes ({BYTES_PER_TOKEN} bytes/token)"
        f" for {card['tokens_estimated_documents']:,} documents"
    )
    lines = [
        f"# Data card: {card['prep_dir']}",
        "",
        f"{card['documents']:,} documents, {card['tokens']:,} tokens ({how}); {card['repositories']:,} "
        f"repositories; bot share {card['bot_share']:.2%}",
        "",
    ]
    lines += _md_table("Tokens by source", card["by_source"])
    lines += _md_table("Tokens by language", card["by_language"])
    lines += _md_table("Tokens by file kind", card["by_file_kind"])
    lines += _md_table(f"Top {len(card['top_repositories'])} repositories", card["top_repositories"])
    if card.get("pull_request_parts"):
        lines += _md_table("Pull-request tokens: context vs edits", card["pull_request_parts"])
    lines += _md_counts("Files removed by the readers (listed paths, by reason)", card["removed_files_by_reason"])
    lines += _md_counts("Skipped (stats.json)", card["skips"])
    lines += _md_counts("Dropped (stats.json)", card["drops"])
    lines += _md_counts("Redactions by kind", card["redactions_by_kind"])
    edges = card["length_histogram_edges"]
    lines += [
        "### Document lengths (tokens)",
        "",
        "| source | " + " | ".join(f">={e:,}" for e in edges) + " |",
        "|---|" + "---:|" * len(edges),
    ]
    lines += [f"| {s} | " + " | ".join(str(c) for c in h) + " |" for s, h in card["length_histograms"].items()]
    return "\n".join(lines) + "\n"


def plot_card(card: dict, path: str | Path) -> Path:
    """A PNG: tokens by source, by file kind, by language and document length histograms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cards = card["inputs"] if "shard_dir" in card else [card]
    fig, axes = plt.subplots(max(len(cards), 1), 4, figsize=(16, 3.2 * max(len(cards), 1)), squeeze=False)
    for row, c in zip(axes, cards):
        for ax, key in zip(row[:3], ("by_source", "by_file_kind", "by_language")):
            items = list(c[key].items())[:10]
            ax.barh([k for k, _ in items][::-1], [v["tokens"] for _, v in items][::-1], color="tab:blue")
            ax.set_title(f"{Path(c['prep_dir']).name}: {key.replace('_', ' ')}", fontsize=9)
            ax.tick_params(labelsize=7)
        edges = c["length_histogram_edges"]
        for s, h in c["length_histograms"].items():
            row[3].plot(range(len(edges)), h, marker="o", label=s)
        row[3].set_xticks(range(len(edges)), [f"{e // 1024}K" if e >= 1024 else str(e) for e in edges], fontsize=7)
        row[3].set_title("document lengths (tokens)", fontsize=9)
        row[3].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return Path(path)


def write_card(directory: str | Path, card: dict) -> list[Path]:
    """datacard.md, datacard.json and datacard.png into ``directory`` (a local path or a URL)."""
    names = ("datacard.md", "datacard.json", "datacard.png")
    with local_folder(str(directory)) as out:
        (out / names[0]).write_text(to_markdown(card))
        (out / names[1]).write_text(json.dumps(card, indent=1))
        plot_card(card, out / names[2])
    return [as_path(str(directory)) / n for n in names]
