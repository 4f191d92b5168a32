"""The host door's listening side: inotify on directories under the host root, and whether the root's
``/sys`` is the running kernel's (where its uevents concern the tree).

A tiny ctypes binding of the three inotify calls (``inotify_init1``, ``inotify_add_watch``,
``inotify_rm_watch``; the events are read with ``os.read``), no dependency (docs/decisions.md). Every
watched path is contained like any other access of the door: its directory resolved inside the root,
refused outside, watched without following a final link (``IN_DONT_FOLLOW``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ..errors import from_oserror

if TYPE_CHECKING:
    from .door import Host

# <sys/inotify.h>
IN_ACCESS, IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE = 0x1, 0x2, 0x4, 0x8, 0x10
IN_OPEN, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x20, 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_DONT_FOLLOW = 0x1000000, 0x2000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
CHANGED = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)
SYSFS_MAGIC = 0x62656572  # statfs f_type of sysfs (linux/magic.h)


class Event(msgspec.Struct, frozen=True):
    """One inotify event: the watched directory (as given to :meth:`Inotify.add`), the entry's name
    in it ("" for the directory itself) and the mask; ``mask & IN_Q_OVERFLOW``: events were lost."""

    dir: str
    name: str
    mask: int


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _failed(what: str, path: str = "") -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}", path or None)


def parse(buf: bytes, dirs: dict[int, str]) -> list[Event]:
    """The events in what one ``read`` of an inotify descriptor returned (``dirs``: watch -> directory)."""
    out, at = [], 0
    while at + _HEADER.size <= len(buf):
        wd, mask, _cookie, size = _HEADER.unpack_from(buf, at)
        name = buf[at + _HEADER.size : at + _HEADER.size + size].split(b"\0", 1)[0].decode(errors="replace")
        at += _HEADER.size + size
        out.append(Event(dirs.get(wd, ""), name, mask))
    return out


class Inotify:
    """One inotify instance of the host door: directories under the root watched by their host path
    (``fileno`` for ``poll``; :meth:`read` never blocks)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._libc = _libc()
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise from_oserror(_failed("inotify_init1"), path="inotify", action="watching")
        self.fd: int = fd
        self.dirs: dict[int, str] = {}  # watch descriptor -> the directory as the caller named it
        self.watched: dict[str, int] = {}

    def fileno(self) -> int:
        return self.fd

    def add(self, path: Path | str, mask: int = CHANGED, user_file: bool = False) -> bool:
        """Watch the directory ``path`` (contained: resolved inside the root, refused outside); False
        when it does not exist (yet). A directory watched already gets the new mask. ``user_file``: the
        directory of a file the user named on the command line, watched where it is (as
        :meth:`~vgpukit.host.Host.read_doc` reads such a file)."""
        shown = os.fspath(path)
        real = os.path.abspath(path) if user_file else self.host.real_directory(path)  # OutsideRoot when out
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(real), mask | IN_ONLYDIR | IN_DONT_FOLLOW)
        if wd < 0:
            if ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR):
                return False
            where = shown if user_file else self.host.display(path)
            raise from_oserror(_failed("inotify_add_watch", shown), path=where, action="watching")
        self.dirs[wd], self.watched[shown] = shown, wd
        return True

    def remove(self, path: Path | str) -> None:
        wd = self.watched.pop(os.fspath(path), None)
        if wd is not None:
            self.dirs.pop(wd, None)
            self._libc.inotify_rm_watch(self.fd, wd)  # EINVAL when the kernel dropped it already: nothing to do

    def read(self) -> list[Event]:
        """Every event queued now (none: an empty list)."""
        out: list[Event] = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            except InterruptedError:
                continue
            events = parse(buf, self.dirs)
            for e in events:
                if e.mask & IN_IGNORED:  # the directory went away: its watch is gone
                    wd = self.watched.pop(e.dir, None)
                    self.dirs.pop(wd if wd is not None else -1, None)
            out += events

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Statfs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_long * 15)]  # the rest of struct statfs (x86_64)


def fs_type(path: Path | str) -> int | None:
    """``statfs(2)``'s f_type of the file system holding ``path`` (None when it cannot be asked)."""
    buf = _Statfs()
    if _libc().statfs(os.fsencode(os.fspath(path)), ctypes.byref(buf)) != 0:
        return None
    return int(buf.f_type) & 0xFFFFFFFF


def live_sysfs(host: Host) -> bool:
    """Whether the root's ``/sys`` is a mounted sysfs: the running kernel's devices, whose uevents
    (netlink) describe it. A copied tree under ``--root``, or a simulated host, is not."""
    sysdir = host.sys()
    return host.is_dir(sysdir) and fs_type(host.real_directory(sysdir)) == SYSFS_MAGIC


class Uevent(msgspec.Struct, frozen=True):
    """One kernel uevent as a listener gets it (netlink, or the simulated kernel's feed): ``action``
    (add, remove, bind, unbind, change, move...), ``devpath`` below ``/sys`` (``/devices/pci0000:00/...``),
    ``subsystem`` and the rest of the message's ``KEY=value`` pairs (``DRIVER``, ``MDEV_TYPE``...)."""

    action: str
    devpath: str
    subsystem: str
    env: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> str | None:
        return next((v for k, v in self.env if k == key), None)

    def line(self) -> str:
        more = " ".join(f"{k}={v}" for k, v in self.env)
        return f"{self.action} {self.subsystem} {self.devpath}" + (f" {more}" if more else "")


class Lost(Exception):
    """Events were lost (a listener's buffer overflowed: netlink's ENOBUFS, inotify's IN_Q_OVERFLOW,
    the simulated feed outrun): whoever keeps a view of the host reads it all again."""
