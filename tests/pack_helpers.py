"""Test inputs for the pack tests: `midtrain prep`-shaped directories written with datatrove's JsonlWriter."""

from __future__ import annotations

import random
from pathlib import Path

from datatrove.data import Document
from datatrove.pipeline.writers import JsonlWriter


def write_prep(prep_dir: Path, docs: list[Document], files: int = 1) -> Path:
    """Write ``docs`` as DIR/documents/NNNNN.jsonl.gz (``files`` files, round-robin), like `midtrain prep`."""
    with JsonlWriter(str(prep_dir / "documents")) as w:
        for i, d in enumerate(docs):
            w.write(d, rank=i % files)
    return prep_dir


def repo_doc(i: int, rng: random.Random, max_files: int = 6, max_lines: int = 200) -> Document:
    files = "".join(
        f"<|file_sep|>src/mod{j}.py\n"
        + "".join(f"value_{k} = {k} * {j}  # line {k}\n" for k in range(rng.randint(3, max_lines)))
        for j in range(rng.randint(1, max_files))
    )
    return Document(
        text=f"<|repo_name|>owner/repo{i}\n{files}",
        id=f"repo-{i}",
        metadata={"source": "repo", "repo": f"owner/repo{i}", "license": "MIT"},
    )


def trace_doc(i: int) -> tuple[Document, str]:
    """A chat-rendered trace whose loss span is the assistant turn; returns the doc and the assistant text."""
    user = f"<|im_start|>user\nPlease fix issue {i} in parser.py<|im_end|>\n"
    head = "<|im_start|>assistant\n"
    answer = f"I changed line {i} of parser.py to handle empty input.<|im_end|>\n"
    text = user + head + answer
    start = len(user) + len(head)
    return Document(
        text=text,
        id=f"trace-{i}",
        metadata={"source": "trace", "repo": None, "license": None, "loss_spans": [[start, len(text)]]},
    ), answer


def commit_doc(i: int, rng: random.Random) -> Document:
    body = "\n".join(f"-old {k}\n+new {k}" for k in range(rng.randint(2, 40)))
    return Document(
        text=f"commit {i}\n\nFix thing {i}\n\n{body}\n",
        id=f"commit-{i}",
        metadata={"source": "commit", "repo": "owner/x", "license": "Apache-2.0"},
    )


def pack_manifest(*args, **kwargs) -> dict:
    """`pack()` run locally: its manifest, which a local run that finished always has."""
    from midtrain.pack.pipeline import pack

    manifest = pack(*args, **kwargs).manifest
    assert manifest is not None, "a local pack finished without a manifest"
    return manifest


def pack_argv(inputs: list[Path], out: Path, *extra: str) -> list[str]:
    """`midtrain pack` of INPUTS into OUT at 256 tokens over two tasks, nothing held out, then EXTRA."""
    head = ["pack", "--input", *map(str, inputs), "--output", str(out), "--seq-length", "256"]
    return [*head, "tasks=2", "valid_fraction=0.0", *extra]
