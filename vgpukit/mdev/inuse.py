"""Who holds a VFIO group open: scan ``/proc/<pid>/fd`` links (same code on a real and a sim host).

A VM's QEMU keeps ``/dev/vfio/<group>`` open for as long as it uses a device of that group. The VM
name comes from QEMU's own command line (``-name guest=NAME,...`` as libvirt starts it, or
``-name NAME``), so no libvirt connection is needed to say which domain uses an instance.
"""

from __future__ import annotations

import os

from ..host import Host
from .model import Holder


def vm_name_from_cmdline(cmdline: str | None) -> str | None:
    """The value of QEMU's ``-name`` option from a NUL-separated command line."""
    if not cmdline:
        return None
    args = cmdline.split("\0")
    for i, arg in enumerate(args[:-1]):
        if arg == "-name":
            value = args[i + 1]
            for part in value.split(","):
                if part.startswith("guest="):
                    return part[len("guest=") :] or None
            return value.split(",")[0] or None
    return None


def group_holders(host: Host, groups: set[int]) -> dict[int, list[Holder]]:
    """For each IOMMU group in ``groups``, the processes holding its ``/dev/vfio/<group>`` node open."""
    out: dict[int, list[Holder]] = {g: [] for g in groups}
    if not groups:
        return out
    wanted = {host.display(host.dev("vfio", str(g))): g for g in groups}
    for pid in host.listdir(host.proc()):
        if not pid.isdigit():
            continue
        fd_dir = host.proc(pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # gone, or not ours to look at
            continue
        hit: set[int] = set()
        for fd in fds:
            target = host.readlink(fd_dir / fd)
            if target in wanted:
                hit.add(wanted[target])
        if not hit:
            continue
        holder = Holder(
            pid=int(pid),
            comm=host.read_opt(host.proc(pid, "comm")),
            vm=vm_name_from_cmdline(host.read_opt(host.proc(pid, "cmdline"))),
        )
        for g in sorted(hit):
            out[g].append(holder)
    return out
