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


def write_fd(fd: int, data: bytes, mode: int | None, held: HeldOpen | None = None) -> None:
    """Write ``data`` to a new or truncated file and close it (or hand it to ``held``, which closes
    it later); ``mode``: what to ``fchmod`` it to (None: it already has the right one)."""
    try:
        os.write(fd, data)
        if mode is not None:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    if held is None:
        os.close(fd)
    else:
        held.hold(fd)


def process_umask() -> int:
    """This process's umask (set and put back: the only way to read it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class HeldOpen:
    """Descriptors of files just written, closed together by :meth:`close_all`: one ``close_range``
    per run of consecutive ones (they are, when nothing else holds a descriptor among them). Only
    descriptors this object holds are closed: a range never spans one it does not hold."""

    LIMIT = 64  # held at most (closed early past this)

    def __init__(self) -> None:
        self.fds: list[int] = []

    def hold(self, fd: int) -> None:
        self.fds.append(fd)
        if len(self.fds) >= self.LIMIT:
            self.close_all()

    def close_all(self) -> None:
        fds, self.fds = sorted(self.fds), []
        start = 0
        for i in range(1, len(fds) + 1):
            if i == len(fds) or fds[i] != fds[i - 1] + 1:  # the end of a run fds[start:i]
                if i - start > 1:
                    os.closerange(fds[start], fds[i - 1] + 1)
                else:
                    os.close(fds[start])
                start = i
