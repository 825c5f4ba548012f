"""Where data lives: local paths or fsspec URLs (``s3://bucket/prefix``, ``hf://datasets/...``, ...).

Outputs are handled as path objects with pathlib's API either way: a local path is a ``pathlib.Path``, a
URL a ``universal_pathlib`` path on the matching fsspec filesystem, so ``out / "documents"``, ``glob``,
``read_text`` and ``open`` work the same on a laptop disk and in a bucket. datatrove takes ``str(path)``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from upath import UPath


def is_url(path: Any) -> bool:
    """True for an fsspec URL (``s3://...``); local paths, absolute or not, are False."""
    return "://" in str(path)


def as_path(path: Any) -> Path:
    """A URL as a universal_pathlib path; a local path as given (a relative one stays relative)."""
    if is_url(path):
        from upath import UPath

        # UPath has pathlib's API without subclassing Path: the callers use only that API
        return UPath(str(path))  # type: ignore[return-value]
    return Path(path)


def location(path: Any) -> Path:
    """A local path as an absolute ``Path``; a URL as a universal_pathlib path (the same API)."""
    return as_path(path) if is_url(path) else Path(path).expanduser().absolute()


def _remote(path: Path) -> UPath:
    """The universal_pathlib path a URL's ``as_path`` made (its ``fs`` and ``path``)."""
    return cast("UPath", path)


def signature(path: Path) -> tuple:
    """What tells that a file changed: (size, mtime in ns) on a filesystem; (size, ETag or modification time)
    in an object store."""
    if is_url(path):
        info = _remote(path).fs.info(_remote(path).path)
        return info["size"], str(info.get("ETag") or info.get("LastModified") or info.get("mtime"))
    st = path.stat()
    return st.st_size, st.st_mtime_ns


@contextmanager
def local_folder(target: Any, last: tuple[str, ...] = ()) -> Iterator[Path]:
    """A local directory whose files end up in ``target``. For a local ``target`` that is ``target`` itself.
    For a URL it is a scratch directory under $TMPDIR, uploaded to ``target`` (same relative paths) when the
    block ends without an error, files whose names end with one of ``last`` after all others (a completion
    file arrives last), then removed. For files that must be local: memory-mapped or written by libraries
    that only take filenames."""
    if not is_url(target):
        yield Path(target)
        return
    with tempfile.TemporaryDirectory(prefix="midtrain-stage-") as tmp:
        yield Path(tmp)
        remote = as_path(target)
        files = sorted(p for p in Path(tmp).rglob("*") if p.is_file())
        for f in sorted(files, key=lambda f: f.name.endswith(last) if last else False):
            _remote(remote).fs.put_file(str(f), _remote(remote / f.relative_to(tmp).as_posix()).path)


def local_copy(path: Path, into: Path) -> Path:
    """A local file with ``path``'s content: ``path`` itself when local, else a download into ``into``."""
    if not is_url(path):
        return Path(path)
    into.mkdir(parents=True, exist_ok=True)
    dest = into / path.name
    _remote(path).fs.get_file(_remote(path).path, str(dest))
    return dest


def write_text_atomic(path: Path, text: str) -> None:
    """Readers never see half a file: local files are written aside and renamed; an object-store put is
    atomic already."""
    if is_url(path):
        path.write_text(text)
        return
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:  # on disk before its name is: a crash after the rename leaves the whole file
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.rename(path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make the names in a local directory durable (a rename into it survives a power loss or node crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Delete a directory (or a prefix in a bucket) and everything under it."""
    if is_url(path):
        _remote(path).fs.rm(_remote(path).path, recursive=True)
    else:
        shutil.rmtree(path)


def ensure_dir(path: Path) -> None:
    """Create a local directory; object stores have no directories to create."""
    if not is_url(path):
        path.mkdir(parents=True, exist_ok=True)
