"""File operations of the simulated kernel at one system call each (no Python file objects, which
add ``fstat``/``ioctl``/``lseek`` calls): the simulator reads and writes its own tree with these."""

from __future__ import annotations

import os
from pathlib import Path

CHUNK = 65536


def read_fd(fd: int) -> str:
    """All of an open file's text, then close it (a short read of a regular file is its end: one
    ``read`` for an attribute)."""
    try:
        chunks = [os.read(fd, CHUNK)]
        while len(chunks[-1]) == CHUNK:
            chunks.append(os.read(fd, CHUNK))
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "surrogateescape")


def read_attr(path: Path | str) -> str:
    """An attribute's text, stripped (one open and read; the simulator reads its own tree)."""
    return read_fd(os.open(path, os.O_RDONLY | os.O_CLOEXEC)).strip()


def write_fd(fd: int, data: bytes, mode: int | None) -> None:
    """Write ``data`` to a new or truncated file and close it; ``mode``: what to ``fchmod`` it to
    (None: it already has the right one)."""
    try:
        os.write(fd, data)
        if mode is not None:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def process_umask() -> int:
    """This process's umask (set and put back: the only way to read it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
