"""Changes to the host: the one gate every change passes through (:meth:`Changes._change`), what it
records (:class:`Change`: the dry-run plan and the change log), dry run (recorded, not made), the watch
told before each change (the simulator's crash testing and storage faults), and the typed error of a
change that failed (a kernel's answer, or a file system full or read-only: :func:`change_error`).

A part of :class:`vgpukit.host.Host`: the gate refuses a target that leads outside the root
(:mod:`.contain`), then writes through :mod:`.fileio`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import msgspec

from ..errors import NotFound, OutsideRoot, VgpukitError, from_oserror, storage_error
from .contain import Containment
from .fileio import KernelPort, TempNames, fsync_dir, write_atomic

T = TypeVar("T")


def debug(msg: str, *args: object) -> None:
    """The host door's debug logging, loaded when a change or a program run needs it (mdevctl's reads
    load no logging)."""
    import logging

    logging.getLogger("vgpukit.host").debug(msg, *args)


class Change(msgspec.Struct, frozen=True):
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


# How an error line says each change of a file (kernel control-file writes keep their own words).
VERBS = {
    "write-file": "writing",
    "remove": "removing",
    "mkdir": "creating the directory",
    "create": "opening",
    "append": "writing",
    "record": "writing",
}


def change_error(exc: OSError, shown: Change) -> VgpukitError:
    """The typed error of a failed change: a kernel control file's errno is the kernel's answer (ENOSPC:
    no capacity); a file's names the file and what to free or fix on a full or read-only file system."""
    if shown.action == "write":
        return from_oserror(exc, path=shown.path, action=f"write {shown.value!r} to", value=shown.value)
    return storage_error(exc, path=shown.path, action=VERBS.get(shown.action, shown.action))


class Changes(Containment):
    """The door's changes (attributes set by ``Host``): each refused outside the root, recorded, made
    unless in dry run."""

    kernel: KernelPort
    watch: Callable[[Change], None] | None  # told of every change before it is made
    dry_run: bool
    changes: list[Change]
    _temps: TempNames  # names of the temporaries write_file renames into place

    def _change(self, change: Change, target: Path, apply: Callable[[], None]) -> None:
        """The single gate every change passes through."""
        whole = os.path.abspath(target)
        parent = os.path.dirname(whole)
        is_link = False
        if whole not in self._plain:
            try:
                is_link = stat.S_ISLNK(os.lstat(whole).st_mode)
                if not is_link and change.action == "write":
                    self._plain.add(whole)  # a control file, checked once: written again without a stat
            except OSError:
                pass
        try:
            outside = self._confined and bool(self._real_dir(parent)) and is_link and not self.contains(target)
        except OutsideRoot:
            outside = True
        if outside:
            raise OutsideRoot(
                f"refusing to change {self.display(target)}: it leads outside the host root {self.root}",
                path=self.display(target),
            )
        shown = Change(change.action, self.display(target), change.value)
        if self.dry_run:
            debug("dry-run: %s", shown.describe())
        else:
            self.through(shown, apply)
        self.changes.append(shown)

    def through(self, shown: Change, fn: Callable[[], T]) -> T:
        """Make the change ``shown`` (its path as the user sees it) with ``fn``: the watch is told first, an
        OSError becomes one typed line (change_error). The engine's own files (journal, lock) too."""
        debug("%s", shown.describe())
        try:
            if self.watch is not None:
                self.watch(shown)  # the simulator's crash testing and storage faults
            return fn()
        except OSError as exc:
            raise change_error(exc, shown) from exc

    def write(self, path: Path, value: str) -> None:
        """Write a kernel control file (sysfs attribute) with one write."""
        self._change(Change("write", str(path), value), path, lambda: self.kernel.write(path, value))

    def write_file(self, path: Path, text: str, mode: int = 0o644) -> None:
        """Create or replace a regular file atomically and durably (config, state, records, specs)."""
        self._change(Change("write-file", str(path)), path, lambda: write_atomic(path, text, mode, self._temps))

    def remove(self, path: Path, missing_ok: bool = True) -> None:
        if not os.path.lexists(path):
            if missing_ok:
                return
            raise NotFound(f"{self.display(path)} does not exist", path=self.display(path))
        self._change(Change("remove", str(path)), path, lambda: os.unlink(path))

    def mkdir(self, path: Path) -> None:
        if path.is_dir():
            return
        self._change(Change("mkdir", str(path)), path, lambda: path.mkdir(parents=True, exist_ok=True))

    def sync_dir(self, path: Path) -> None:
        """Make a rename or unlink in the directory ``path`` durable (the engine's journal, beside its own
        writes): the directory resolved inside the root (refused outside), then fsync'd."""
        fsync_dir(Path(self._real_dir(os.path.abspath(path))) if self._confined else path)
