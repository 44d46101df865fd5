"""Atomic file writes: a file is complete or absent (the previous version stays), whatever kills the writer.

Everything is written to ``<path>.tmp`` beside the target and renamed over it (``os.replace``, atomic on
POSIX), so a crash or SIGKILL at any moment leaves the previous file intact and at worst a stray ``.tmp``,
which the next write overwrites.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def tmp_path(path: str | Path) -> Path:
    """``<path>.tmp``: where an atomic write of ``path`` goes first."""
    path = Path(path)
    return path.with_name(path.name + ".tmp")


def fsync_dir(directory: str | Path) -> None:
    """Flush ``directory``'s entries (a rename into it) to the disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_write(
    path: str | Path, mode: str = "wb", *, fsync: bool = True, sync_dir: bool = False, newline: str | None = None
) -> Iterator[IO[Any]]:
    """Open ``<path>.tmp`` for writing; when the block ends without an exception, flush (and with ``fsync``,
    fsync) it and rename it over ``path``; with ``sync_dir``, fsync the directory too (the rename itself
    survives a power cut). An exception leaves ``path`` as it was."""
    path = Path(path)
    tmp = tmp_path(path)
    with open(tmp, mode, newline=newline) as f:
        yield f
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)


@contextmanager
def atomic_path(path: str | Path, unique: bool = False) -> Iterator[Path]:
    """``<path>.tmp`` for a writer that takes a file name (``torch.save``, ``onnx.save``, a compiler's ``-o``);
    renamed over ``path`` when the block ends without an exception, removed when it raises (``path`` stays as it
    was). ``unique``: a fresh temporary name beside ``path`` instead, for processes that may write the same
    ``path`` at once (the last rename wins, and every version is whole)."""
    path = Path(path)
    # unique: a name no other process picks (the writer creates the file, with its usual permissions)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp") if unique else tmp_path(path)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
