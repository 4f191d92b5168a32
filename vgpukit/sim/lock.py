"""The simulated kernel's own lock (``.vgpukit-sim/lock``): one kernel reaction at a time on a simulated host.

A real kernel serialises a sysfs write with its own locks, for the length of the write; a simulated
one holds this ``flock`` while it reacts (and while a command opening the host undoes a reaction a
killed process left half-done). A command that finds it held waits as it waits for the host lock:
up to ``--wait`` seconds (``VGPUKIT_WAIT``, default 30), saying once on stderr whom it waits for,
then gives up with exit 4 naming the holder (a command stopped in the middle of a reaction, say).
The holder writes its pid and command line into the file while it holds it, as the host lock's does.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import time
from pathlib import Path

from ..errors import Busy

POLL = 0.05
NOTICE_AFTER = 1.0  # a reaction takes milliseconds: a wait longer than this is said once on stderr
WAIT_ENV = "VGPUKIT_WAIT"
DEFAULT_WAIT = 30.0


def default_wait() -> float:
    """``VGPUKIT_WAIT`` when it is a number of seconds, else 30 (``--wait`` sets it for the command)."""
    try:
        value = float(os.environ.get(WAIT_ENV, ""))
    except ValueError:
        return DEFAULT_WAIT
    return value if 0 <= value <= 86400 else DEFAULT_WAIT


def _me() -> str:
    words = [os.path.basename(w) if i == 0 else w for i, w in enumerate(sys.argv)]
    if words and words[0] in ("__main__.py", "vgpukit"):
        words[0] = "vgpukit"
    return "".join(c if c.isprintable() else "?" for c in " ".join(words))[:200]


def holder(fd: int) -> str:
    """``pid N (command line)`` of the holder, from its record; '' when it wrote none."""
    try:
        text = os.pread(fd, 512, 0).decode(errors="replace")
    except OSError:
        return ""
    pid, _, cmd = text.partition("\n")
    if not (pid.isascii() and pid.isdigit()):
        return ""
    cmd = "".join(c if c.isprintable() else "?" for c in cmd.strip())
    return f"pid {pid}" + (f" ({cmd})" if cmd else "")


def take(fd: int, root: Path, wait: float) -> None:
    """Hold the lock on ``fd`` (the lock file, opened read-write), waiting up to ``wait`` seconds."""
    start = time.monotonic()
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        waited = time.monotonic() - start
        if waited >= wait:
            who = holder(fd) or "another process"
            raise Busy(
                f"the simulated kernel of {root} is busy: {who} is in the middle of a change",
                path=str(root),
                hint=f"waited {wait:g} s; a command stopped or hung there holds it (resume or end it), or wait "
                "longer with --wait SECONDS",
            )
        if not told and waited >= NOTICE_AFTER:
            sys.stderr.write(
                f"vgpukit: simulated kernel busy: waiting for {holder(fd) or 'another process'}, up to {wait:g} s\n"
            )
            told = True
        time.sleep(POLL)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{_me()}\n".encode(errors="replace"), 0)
    except OSError:  # the record only names the holder: the lock is held all the same
        pass


def release(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass
    fcntl.flock(fd, fcntl.LOCK_UN)


def open_lock(root: Path) -> int:
    """The lock file's descriptor (read-write; the directory and the file made when missing)."""
    path = root / ".vgpukit-sim" / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
