"""What a batch of events names: the PCI functions to read again, and which kinds of facts changed.

A uevent names a sysfs path; the device it is about is the path's last component (a PCI function's
address, an mdev's UUID under its parent, a VFIO group). Kinds (what a view of the host depends on):

* ``pci``: PCI functions came, went, bound, unbound or changed (uevents of ``pci``, ``mdev``, ``vfio``...);
* ``docs``: a file vgpukit keeps changed (a change committed by the change engine: its journal removed;
  a config file under ``/etc/vgpukit``, an mdevctl definition);
* ``holders``: a VFIO node was opened or closed (``/dev/vfio``): who holds a device may have changed;
  a node that came or went is ``pci`` too, its group in ``groups`` (``docs`` where no uevents come);
* ``lock``: the host lock's file was closed by a writer (a command let go of the lock);
* ``nvml``: the NVIDIA driver reported events (XID, ECC, a lost GPU);
* ``full``: events were lost, the process just started, or the safety net's full look came: read it all
  (its other looks are ``pci`` and ``nvml`` naming no function: the GPUs' side).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..host import BDF_RE
from ..host.notify import Uevent

KINDS = ("pci", "docs", "holders", "lock", "nvml", "full")


@dataclass
class Touch:
    bdfs: set[str] = field(default_factory=set)
    added: set[str] = field(default_factory=set)  # functions that appeared (their PF is read again too)
    groups: set[str] = field(default_factory=set)  # VFIO groups whose node came or went (/dev/vfio/<group>)
    settings: bool = False  # a configuration file of vgpukit's changed (not only a change committed)
    kinds: set[str] = field(default_factory=set)
    why: list[str] = field(default_factory=list)  # for the debug log: what came
    nvml_events: list[Any] = field(default_factory=list)  # what the watch's NVML event set delivered
    net: bool = False  # the safety net's look (not an event's)

    def __bool__(self) -> bool:
        return bool(self.kinds)

    @property
    def full(self) -> bool:
        return "full" in self.kinds

    def everything(self, why: str) -> None:
        self.kinds.add("full")
        self.why.append(why)

    def uevent(self, ev: Uevent) -> None:
        """Take one uevent: the PCI function it names (a function's own, the parent of an mdev or a
        VFIO cdev) is read again; anything it names changes the ``pci`` facts."""
        parts = [p for p in ev.devpath.split("/") if p]
        self.kinds.add("pci")
        self.why.append(ev.line())
        own = [p for p in parts if BDF_RE.match(p)]
        if ev.subsystem == "vfio" and not own and parts and parts[-1].isdigit():
            self.groups.add(parts[-1])  # a VFIO group's node: the functions in that group
        if not own:
            return  # a virtual device (a VFIO group, an mdev of a virtual parent): nothing to forget
        bdf = own[-1]
        self.bdfs.add(bdf)
        if ev.subsystem == "pci" and ev.action == "add" and parts[-1] == bdf:
            self.added.add(bdf)

    def merge(self, other: Touch) -> None:
        self.bdfs |= other.bdfs
        self.added |= other.added
        self.groups |= other.groups
        self.settings |= other.settings
        self.kinds |= other.kinds
        self.why += other.why
        self.nvml_events += other.nvml_events
        self.net |= other.net
