"""Which processes hold VFIO device nodes open: one ``/proc`` scan, the same on real and simulated hosts.

A VM's QEMU (or a container) keeps ``/dev/vfio/<group>`` (or a VFIO device cdev
``/dev/vfio/devices/vfioN``) open for as long as it uses a device. ``vgpukit sim hold`` leaves
exactly such an fd link in a simulated host's ``proc/``. The VM name comes from QEMU's own command
line (``-name guest=NAME,...`` as libvirt starts it, or ``-name NAME``), so no libvirt connection is
needed to say which VM uses a device.
"""

from __future__ import annotations

import msgspec

from .errors import VgpukitError
from .host import Host


class Holder(msgspec.Struct, frozen=True):
    pid: int
    comm: str | None
    vm: str | None = None  # QEMU -name (libvirt domain name) when known

    def describe(self) -> str:
        who = self.vm or self.comm or "process"
        return f"{who} (pid {self.pid})"


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


class OpenFiles:
    """Holders of every node under /dev/vfio, from one lazy /proc scan per command."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._by_node: dict[str, list[Holder]] | None = None

    def _scan(self) -> dict[str, list[Holder]]:
        host = self.host
        out: dict[str, list[Holder]] = {}
        prefix = host.display(host.vfio_dir()) + "/"
        try:
            pids = [p for p in host.listdir(host.processes()) if p.isdigit()]
        except VgpukitError:
            return out
        for pid in pids:
            try:
                fds = host.listdir(host.process(pid, "fd"))
            except VgpukitError:  # the process exited, or it is not ours to look at
                continue
            nodes = {t for fd in fds if (t := host.readlink(host.process(pid, "fd", fd))) and t.startswith(prefix)}
            if not nodes:
                continue
            holder = Holder(
                pid=int(pid),
                comm=host.read_opt(host.process(pid, "comm")),
                vm=vm_name_from_cmdline(host.read_opt(host.process(pid, "cmdline"))),
            )
            for node in sorted(nodes):
                out.setdefault(node, []).append(holder)
        return out

    def holders(self, node: str) -> list[Holder]:
        """Processes holding ``node``, a host path as displayed (``/dev/vfio/12``)."""
        if self._by_node is None:
            self._by_node = self._scan()
        return self._by_node.get(node, [])

    def group(self, group: int) -> list[Holder]:
        return self.holders(self.host.display(self.host.vfio_group_node(group)))


def callers(host: Host) -> set[int]:
    """This process and its ancestors (pids, from ``/proc/<pid>/stat`` through the host door): whoever
    runs vgpukit -- a shell, libvirtd running ``mdevctl stop`` -- is not a user of the device it asks
    to change. Empty where /proc does not know this process (a simulated host without such entries)."""
    import os

    chain: set[int] = set()
    pid = os.getpid()
    while pid > 1 and pid not in chain:
        stat = host.read_opt(host.proc(str(pid), "stat"))
        if not stat or ")" not in stat:
            break
        chain.add(pid)
        fields = stat.rsplit(")", 1)[1].split()
        pid = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0
    return chain


def device_users(holders: list[Holder], calling: set[int]) -> list[Holder]:
    """The holders that count as users of a device (docs/decisions.md, "In use"): every process with an
    fd on the device's VFIO node, except this command's callers that are not VMs (no QEMU ``-name``)."""
    return [h for h in holders if h.vm is not None or h.pid not in calling]


def group_holders(host: Host, groups: set[int]) -> dict[int, list[Holder]]:
    """For each IOMMU group in ``groups``, the processes holding its ``/dev/vfio/<group>`` node open."""
    files = OpenFiles(host)
    return {g: files.group(g) for g in groups}
