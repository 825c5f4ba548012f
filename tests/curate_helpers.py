"""Helpers for the curation tests: raw JSONL documents in the sources' formats, running stages, reading output."""

from __future__ import annotations

import gzip
import json
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from midtrain.curate.stages import CurationConfig, curation_stages
from midtrain.runner import StageChain, stage_stats, step_totals

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def stdlib(path: str) -> str:
    """Real code: a file of the Python standard library."""
    return (STDLIB / path).read_text()


def repo_row(name: str | None, files: dict[str, str], license: str | None = "MIT", **meta) -> dict:
    """A repository document as midtrain/sources/repos.py renders it (repo header, file headers, offsets)."""
    header = f"<|repo_name|>{name or 'unnamed'}\n"
    text, offsets = header, []
    for path, body in files.items():
        offsets.append(len(text))
        text += f"<|file_sep|>{path}\n" + (body if body.endswith("\n") else body + "\n")
    doc_id = f"repo:{name}"
    return {
        "text": text,
        "id": doc_id,
        "metadata": {
            "source": "repo",
            "repo": name,
            "license": license,
            "id": doc_id,
            "files": list(files),
            "file_offsets": offsets,
            **meta,
        },
    }


def doc_row(
    text, doc_id: str, source: str = "pr", repo: str | None = "acme/app", license: str | None = "MIT", **meta
) -> dict:
    return {
        "text": text,
        "id": doc_id,
        "metadata": {"source": source, "repo": repo, "license": license, "id": doc_id, **meta},
    }


def write_raw(raw: Path, *files: Sequence[dict | str]) -> None:
    """One JSONL file per list (a str row is written verbatim: malformed lines)."""
    raw.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(files):
        with open(raw / f"{i:05d}.jsonl", "w") as f:
            for r in rows:
                f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def read_docs(folder: Path) -> list[dict]:
    out: list[dict] = []
    for f in sorted(Path(folder).rglob("*.jsonl*")):
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    return out


def run_curation(cfg: CurationConfig, source: str, raw: Path, prep: Path, tasks: int = 1) -> dict[str, dict[str, int]]:
    """Every curation stage on RAW into PREP/documents, run by the stage runner as `midtrain prep` runs them;
    returns each step's counts ({step label: {stat: total}})."""
    stages = curation_stages(cfg, source, str(raw), str(prep / "documents"), str(prep / "work"), tasks)
    chain = StageChain(label=f"curate {source}")
    logs = prep / "work" / "logs"
    for st in stages:
        chain.add(st.name, st.pipeline, st.tasks or tasks, str(logs / st.name), job_name=st.name)
    chain.run()
    return step_totals(stage_stats(logs / st.name) for st in stages)


def curate(
    tmp: Path, cfg: CurationConfig | None = None, tasks: int = 1, source: str = "repo"
) -> tuple[list[dict], dict[str, dict[str, int]], Path]:
    """Run every curation stage on tmp/raw; returns (output documents, counts by step, prep dir)."""
    prep = tmp / "prep"
    counts = run_curation(cfg or CurationConfig(), source, tmp / "raw", prep, tasks)
    return read_docs(prep / "documents"), counts, prep


def count(counts: dict[str, dict[str, int]], step: str, stat: str) -> int:
    """The total of ``stat`` over the steps whose name contains ``step``."""
    return sum(c.get(stat, 0) for name, c in counts.items() if step in name)
