"""The host lock: one mutating vgpukit command at a time on a host.

An exclusive ``flock`` on ``<root>/run/vgpukit/lock`` (a simulated host has its own, under its
directory). The holder writes its pid and command line into the file so a waiter that gives up can
say who holds it. The kernel drops the lock when the holder dies, even on ``kill -9``: a stale file
never blocks anyone. Reads take no lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import Busy, from_oserror
from ..host import Change, Host

if TYPE_CHECKING:
    from .progress import Progress

POLL = 0.05
NAME_WAIT = 0.5  # how long a waiter waits for a holder that just locked to write its name


def lock_path(host: Host) -> str:
    return str(host.state_dir("lock"))


def holder(host: Host) -> str:
    """Who holds the lock: "pid 123 (vgpukit sriov enable ...)", or ''. The holder writes its pid and
    command line into the lock file right after taking it; until it has (or when it cannot: a full
    /run, a holder that is not vgpukit), the kernel's /proc/locks names the pid and /proc/<pid>/cmdline
    its command line, both read through the host door."""
    path = host.state_dir("lock")
    text = host.read_opt(path, "") or ""
    pid_text, _, cmd = text.partition("\n")
    if pid_text.isascii() and pid_text.isdigit():
        pid = int(pid_text)
        cmd = "".join(ch if ch.isprintable() else "?" for ch in cmd.strip())[:200]
    else:
        from ..processes import command_line, flock_holder

        found = flock_holder(host, path)
        if found is None:
            return ""
        pid, cmd = found, command_line(host, found)
    return f"pid {pid}" + (f" ({cmd})" if cmd else "")


def unnamed(host: Host) -> str:
    """The holder neither its record nor /proc/locks names (an admin's ``flock``; on a simulated host, any
    process that is not vgpukit: its /proc is the simulator's, which lists no real process)."""
    return f"a process that is not a vgpukit command (no holder record; fuser -v {host.state_dir('lock')} names it)"


def try_flock(fd: int, shown: str) -> bool:
    """Take an exclusive ``flock`` on ``fd`` without waiting: False when another process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise from_oserror(exc, path=shown, action="locking") from exc
        return False


@contextmanager
def flocked(host: Host, path: Path, what: str, take: Callable[[int, str], None], record: str) -> Iterator[int]:
    """Hold an exclusive ``flock`` on the state file ``path`` (one holder per host): ``take(fd, shown)``
    gets it or raises; the holder's ``record`` (its pid first) is written into the file while it holds
    it and cleared after. The kernel drops the lock when the holder dies, even on ``kill -9``, unless a
    child forked meanwhile still has the descriptor: the one yielded, for such a child to close."""
    host.mkdir(path.parent)
    host.resolve(path.parent)  # refuse a state directory that leads outside the root
    shown = host.display(path)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = host.through(Change("create", shown), lambda: os.open(path, flags, 0o600))
    try:
        take(fd, shown)

        def put() -> None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode(errors="replace"), 0)

        host.through(Change("record", shown), put)
        try:
            yield fd
        finally:
            try:
                os.ftruncate(fd, 0)
            except OSError:  # a failing file system: the next holder writes its own record over it
                pass
    finally:
        os.close(fd)  # closing drops the flock


def host_lock(host: Host, command: str, wait: float, progress: Progress | None = None) -> AbstractContextManager[int]:
    """Hold the host lock; wait up to ``wait`` seconds for it, telling ``progress`` at once who holds it."""

    def take(fd: int, shown: str) -> None:
        start = time.monotonic()
        deadline = start + max(wait, 0.0)
        told = progress is None or wait <= 0
        while not try_flock(fd, shown):
            if time.monotonic() >= deadline:
                who = holder(host)
                raise Busy(
                    f"another vgpukit command is changing this host: {who}"
                    if who
                    else f"another process holds this host's lock: {unnamed(host)}",
                    path=shown,
                    hint=f"waited {wait:g} s; wait longer with --wait SECONDS",
                )
            if not told:  # at once, or as soon as the holder has written its name (it writes it right after locking)
                who = holder(host)
                if who or time.monotonic() - start >= NAME_WAIT:
                    progress.waiting(who or unnamed(host), wait)  # type: ignore[union-attr]
                    told = True
            time.sleep(POLL)

    return flocked(host, host.state_dir("lock"), "the host lock", take, f"{os.getpid()}\n{command}\n")
