"""Low-level pieces of the host door: how a control-file write reaches the kernel, canonical paths
without a per-component walk, durable renames. Used only by :mod:`vgpukit.host` (and the journal)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class KernelPort(Protocol):
    """How a control-file write reaches the kernel."""

    def write(self, path: Path, data: str) -> None: ...


class RealKernel:
    """A single ``write(2)`` of the whole value, as sysfs expects."""

    def write(self, path: Path, data: str) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)


def _real_path(path: Path | str) -> str:
    """The canonical path, as the kernel resolves it: an ``O_PATH`` open and one readlink of its
    ``/proc/self/fd`` entry, instead of an lstat per component; ``realpath`` where that cannot be."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Change:
    """One change to the host, as recorded in dry-run mode and in the change log."""

    action: str  # write | write-file | remove | mkdir | symlink
    path: str
    value: str | None = None

    def describe(self) -> str:
        if self.action == "write":
            return f"write {self.value!r} > {self.path}"
        if self.action == "write-file":
            return f"write file {self.path}"
        return f"{self.action} {self.path}" + (f" -> {self.value}" if self.value else "")
