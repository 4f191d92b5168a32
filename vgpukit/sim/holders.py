"""Simulated processes holding devices open (a VM's QEMU holding /dev/vfio/<group>).

``vgpukit sim hold DEVICE`` writes a process entry under ``<sim>/proc/<pid>/`` with an ``fd`` symlink
to the device's VFIO group node, exactly what a real QEMU leaves in /proc; the toolkit's in-use checks
read /proc the same way on both.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .tree import SimTree

FIRST_PID = 40000


def _devnode_text(group: str) -> str:
    return "/" + os.path.join("dev", "vfio", group)


def holders_of(root: Path, group: str) -> list[int]:
    """Pids holding ``/dev/vfio/<group>`` on the simulated host (what the kernel knows of open files)."""
    node = _devnode_text(group)
    proc = root / "proc"
    out = []
    for pid in sorted(int(p) for p in os.listdir(proc) if p.isdigit()) if proc.is_dir() else []:
        with contextlib.suppress(OSError):
            fds = os.listdir(proc / str(pid) / "fd")
            if any(os.readlink(proc / str(pid) / "fd" / fd) == node for fd in fds):
                out.append(pid)
    return out


def hold(root: Path, group: str, comm: str = "qemu-system-x86", owner: str = "") -> int:
    proc = root / "proc"
    proc.mkdir(exist_ok=True)
    taken = {int(p) for p in os.listdir(proc) if p.isdigit()}
    pid = max(taken | {FIRST_PID - 1}) + 1
    d = proc / str(pid)
    tree = SimTree(root)
    tree.write_attr(d / "comm", comm)
    tree.write_attr(d / "cmdline", f"{comm}\0-name\0{owner or 'sim-vm'}\0")
    tree.mkdir(d / "fd")
    os.symlink(_devnode_text(group), d / "fd" / "20")  # an absolute link text, as /proc shows it
    _touch_node(root, group)
    return pid


def _touch_node(root: Path, group: str) -> None:
    """Open and close the group's node, as the process that opens it (or, exiting, closes it) would:
    inotify watchers of /dev/vfio see it (the watch reads the holders again). The simulated process
    holds no descriptor, so its open and its close come together."""
    with contextlib.suppress(OSError):
        os.close(os.open(root / "dev" / "vfio" / group, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC))


def release(root: Path, pid: int) -> bool:
    d = root / "proc" / str(pid)
    if not (d / "fd").is_dir():
        return False
    import shutil  # only when a holder is released

    groups = [os.path.basename(os.readlink(d / "fd" / fd)) for fd in os.listdir(d / "fd")]
    shutil.rmtree(d)
    for group in groups:
        _touch_node(root, group)
    return True
