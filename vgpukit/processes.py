"""The host's processes, read through the host door: is a pid alive, in which state, since when.

One reading of ``/proc/<pid>/stat`` for every question (the QoS daemon's tenants, the CUDA library's
usage slots); without ``/proc`` (a container without the host's pid namespace) the answer comes from
``kill(pid, 0)``.
"""

from __future__ import annotations

import os

from .host import Host


def _stat(host: Host, pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3, the state, first)."""
    text = host.read_opt(host.process(pid, "stat"))
    return None if text is None else text.rsplit(")", 1)[-1].split()


def state(host: Host, pid: int) -> str | None:
    """The one-letter state (``R``, ``S``, ``T``, ``Z``...), or None when /proc does not show the pid."""
    fields = _stat(host, pid)
    return fields[0] if fields else None


def start_time(host: Host, pid: int) -> int | None:
    """When the process started (clock ticks after boot; field 22): tells a pid reused since."""
    fields = _stat(host, pid)
    return int(fields[19]) if fields and len(fields) > 19 and fields[19].isdigit() else None


def alive(host: Host, pid: int, start: int = 0) -> bool:
    """Whether ``pid`` is a live process (a zombie is not); with ``start`` (its start time, 0: any), the
    same process and not a later one that reused the pid."""
    fields = _stat(host, pid)
    if fields:
        if fields[0] in ("Z", "X"):
            return False
        if start:
            return len(fields) > 19 and fields[19].isdigit() and int(fields[19]) == start
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def flock_holder(host: Host, path: os.PathLike[str] | str) -> int | None:
    """The pid holding a ``flock`` on the file ``path``, as the kernel lists it in ``/proc/locks``
    (``1: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF``); None when none is listed there
    (no /proc under the root: a simulated host's /proc is its own)."""
    text = host.read_opt(host.file_locks())
    if not text:
        return None
    try:  # the lock file itself, never a link (it is opened O_NOFOLLOW in a directory checked inside the root)
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and "->" not in fields and fields[1] == "FLOCK" and fields[5] == key:
            return int(fields[4]) if fields[4].isdigit() else None
    return None


def command_line(host: Host, pid: int, limit: int = 200) -> str:
    """How a process was started, as a user would type it: ``/proc/<pid>/cmdline``'s words, the
    interpreter of a Python program left out (``python3 -m vgpukit ...`` is ``vgpukit ...``), the
    program named by its file name; '' when /proc does not show it."""
    text = host.read_opt(host.process(pid, "cmdline"))
    words = [w for w in (text or "").split("\0") if w]
    if len(words) > 1 and os.path.basename(words[0]).startswith("python"):
        words = words[1:]
        if words[:2] == ["-m", "vgpukit"]:
            words = ["vgpukit", *words[2:]]
    if words:
        words[0] = os.path.basename(words[0])
    return "".join(ch if ch.isprintable() else "?" for ch in " ".join(words))[:limit]
