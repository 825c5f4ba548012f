"""Where data lives: local paths or fsspec URLs (``s3://bucket/prefix``, ``hf://datasets/...``, ...).

Outputs are handled as path objects with pathlib's API either way: a local path is a ``pathlib.Path``, a
URL a ``universal_pathlib`` path on the matching fsspec filesystem, so ``out / "documents"``, ``glob``,
``read_text`` and ``open`` work the same on a laptop disk and in a bucket. datatrove takes ``str(path)``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def is_url(path: Any) -> bool:
    """True for an fsspec URL (``s3://...``); local paths, absolute or not, are False."""
    return "://" in str(path)


def location(path: Any) -> Path:
    """A local path as an absolute ``Path``; a URL as a universal_pathlib path (the same API)."""
    if is_url(path):
        from upath import UPath

        return UPath(str(path))
    return Path(path).expanduser().absolute()


def write_text_atomic(path: Path, text: str) -> None:
    """Readers never see half a file: local files are written aside and renamed; an object-store put is
    atomic already."""
    if is_url(path):
        path.write_text(text)
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(path)


def remove_tree(path: Path) -> None:
    """Delete a directory (or a prefix in a bucket) and everything under it."""
    if is_url(path):
        path.fs.rm(path.path, recursive=True)
    else:
        shutil.rmtree(path)


def ensure_dir(path: Path) -> None:
    """Create a local directory; object stores have no directories to create."""
    if not is_url(path):
        path.mkdir(parents=True, exist_ok=True)
