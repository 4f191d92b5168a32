"""What a simulated host's VMs need around vgpukit: libvirt's test driver for the domains, and QEMU.

libvirt's test driver (``test:///default``, shared by everything in this process) keeps domains and
their state, but runs no QEMU: on a simulated host, a VM's QEMU is a process entry in the host's
``proc/`` holding the VFIO nodes of the domain's devices (what ``vgpukit sim hold`` writes).
:class:`Qemu` plays QEMU for the domains it is given: while a domain runs, a process holds its devices'
VFIO groups; when libvirt stops it (shutdown, managed save, destroy), that process goes, as QEMU's
exit closes its files; when libvirt starts it again, a new one holds them. A thread watches libvirt
and does this as it happens, so vgpukit's drain (libvirt calls, then waiting for the holders to go)
meets the world it meets on a real host.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from vgpukit.sim import holders as simholders

URI = "test:///default"


def group_of(sim: Path, device: str) -> str:
    """The IOMMU group of a PCI function (its address) or an mdev (its UUID) on the simulated host."""
    if ":" in device:
        link = sim / "sys" / "bus" / "pci" / "devices" / device / "iommu_group"
    else:
        link = sim / "sys" / "bus" / "mdev" / "devices" / device / "iommu_group"
    return os.path.basename(os.readlink(link))


def hostdev(device: str, managed: str = "yes") -> str:
    if ":" in device:
        d, b, sf = device.split(":")
        s, f = sf.split(".")
        return (
            f"<hostdev mode='subsystem' type='pci' managed='{managed}'><source>"
            f"<address domain='0x{d}' bus='0x{b}' slot='0x{s}' function='0x{f}'/></source></hostdev>"
        )
    return (
        f"<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{device}'/></source></hostdev>"
    )


def domain_xml(name: str, devices: list[str]) -> str:
    return (
        f"<domain type='kvm'><name>{name}</name><memory unit='MiB'>512</memory>"
        "<os><type arch='x86_64' machine='q35'>hvm</type></os>"
        f"<devices>{''.join(hostdev(d) for d in devices)}</devices></domain>"
    )


class Qemu:
    """QEMU for the test driver's domains on simulated host ``sim`` (see the module doc)."""

    def __init__(self, sim: Path) -> None:
        import libvirt

        self.sim = sim
        self.conn: Any = libvirt.open(URI)
        self.domains: dict[str, list[str]] = {}
        self.pids: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.starts: dict[str, int] = {}
        self.passes = 0  # how many times the watcher looked at every domain
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def define(self, name: str, devices: list[str]) -> None:
        """A persistent domain holding ``devices``, started (its QEMU holds them)."""
        with self.lock:
            dom = self.conn.defineXML(domain_xml(name, devices))
            dom.create()
            self.domains[name] = devices
            self._hold(name)

    def _hold(self, name: str) -> None:
        groups = {group_of(self.sim, d) for d in self.domains[name]}
        pid = 0
        for g in sorted(groups):  # one process, every group (a second fd per group)
            if not pid:
                pid = simholders.hold(self.sim, g, owner=name)
            else:
                os.symlink(f"/dev/vfio/{g}", self.sim / "proc" / str(pid) / "fd" / f"2{g}")
        self.pids[name] = pid
        self.starts[name] = self.starts.get(name, 0) + 1

    def active(self, name: str) -> bool:
        return bool(self.conn.lookupByName(name).isActive())

    def pid(self, name: str) -> int | None:
        return self.pids.get(name)

    def _watch(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                for name in list(self.domains):
                    try:
                        on = self.active(name)
                    except Exception:  # undefined meanwhile: its QEMU is gone
                        on = False
                    if not on and name in self.pids:
                        simholders.release(self.sim, self.pids.pop(name))
                    elif on and name not in self.pids:
                        self._hold(name)
                self.passes += 1
            self.stop.wait(0.02)

    def settle(self) -> None:
        """Wait until the watcher has looked at every domain twice since now (QEMU caught up with libvirt)."""
        import time

        start = self.passes
        deadline = time.monotonic() + 10
        while self.passes < start + 2 and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for name in self.domains:
            try:
                dom = self.conn.lookupByName(name)
                if dom.isActive():
                    dom.destroy()
                if dom.hasManagedSaveImage(0):
                    dom.managedSaveRemove(0)
                dom.undefine()
            except Exception:
                pass
        self.conn.close()
