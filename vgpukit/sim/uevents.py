"""The simulated kernel's uevents: what it announces when a write (or an injected fault) changes devices.

A real kernel sends each uevent on a netlink socket (``add``/``remove`` when a device comes or goes,
``bind``/``unbind`` when a driver takes or leaves it, ``change``); a listener such as pyudev's monitor
reads them. The simulated kernel appends the same messages, one JSON object a line
(``{"action", "devpath", "subsystem", "env"}``), to its own feed ``.vgpukit-sim/uevents.jsonl``, once
the write that caused them is committed (a failed write announces nothing). Which events a change
makes, and in which order, is the simulator's own table (:data:`ORDER` and the calls in
:mod:`.tree` and :mod:`.reactions_mdev`), checked against Linux in QEMU (tests/realkernel/test_watch_realkernel.py).

:class:`FeedReader` is the listening side, as a netlink socket is: it wakes (inotify) when the feed
grows and delivers what came since it opened; a reader left behind by more than its buffer loses
the events, as a netlink socket does with ENOBUFS, and says so (:class:`~vgpukit.host.notify.Lost`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..host import Host
from ..host.notify import CHANGED, IN_MODIFY, Inotify, Lost, Uevent
from .state import sim_meta_dir
from .tree import SimTree

FEED = "uevents.jsonl"
FEED_MAX = 4 << 20  # the feed starts again past this (a reader behind it has lost events)
BUFFER = 208 << 10  # what a reader holds unread before it loses events: net.core.rmem_default's 212992 bytes
# The kernel's order for one device, as seen in QEMU (Linux 6.1): a device's own add comes first; a
# driver's probe that registers a VFIO group announces the group (vfio add) before its bind; on the
# way out the group goes (vfio remove), then the unbind, then the device's remove.
ORDER = ("add", "bind", "unbind", "remove", "change")


def devpath(root: Path, real: Path | str) -> str:
    """``/devices/...``: a real directory of the simulated sysfs, as a uevent names it."""
    return "/" + os.path.relpath(real, Path(root) / "sys")


def event(action: str, path: str, subsystem: str, **env: str) -> dict[str, Any]:
    return {"action": action, "devpath": path, "subsystem": subsystem, "env": env}


def vfio_group(group: str) -> str:
    """The devpath of a VFIO group's device (its node is ``/dev/vfio/<group>``)."""
    return f"/devices/virtual/vfio/{group}"


def publish(root: Path, events: list[dict[str, Any]]) -> None:
    """Append ``events`` to the feed in one write (a reader never sees half a line)."""
    if not events:
        return
    path = sim_meta_dir(root) / FEED
    data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events).encode()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if os.stat(path).st_size + len(data) > FEED_MAX:
            flags |= os.O_TRUNC  # readers find it shorter than where they were: they lost events
    except FileNotFoundError:
        pass
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


@dataclass
class AnnouncingTree(SimTree):
    """The simulated kernel's tree while a write is in flight: each device that comes, goes, binds or
    unbinds is announced in ``uevents`` (published by the kernel once the write is committed)."""

    uevents: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def _path(self, bdf: str) -> str:
        return devpath(self.root, self.device_dir(bdf))

    def _group_node(self, bdf: str) -> tuple[str, bool]:
        try:
            group = os.path.basename(os.readlink(self.device_dir(bdf) / "iommu_group"))
        except OSError:
            return "", False
        return group, os.path.lexists(self.devnode("vfio", group))

    def add_pci_device(
        self, parent_dir: Path, bdf: str, spec: dict[str, Any], numa: int | None, cpulist: str | None, group: int
    ) -> Path:
        d = super().add_pci_device(parent_dir, bdf, spec, numa, cpulist, group)
        self.uevents.append(event("add", devpath(self.root, d), "pci", PCI_SLOT_NAME=bdf))
        self.uevents.append(event("change", devpath(self.root, d), "pci", PCI_SLOT_NAME=bdf))  # seen on Linux 6.1
        return d

    def changed(self, bdf: str) -> None:
        """A ``change`` of the device (a PF whose VFs were enabled: after its VFs' events)."""
        driver = self.bound_driver(bdf)
        env = {"DRIVER": driver} if driver else {}
        self.uevents.append(event("change", self._path(bdf), "pci", **env, PCI_SLOT_NAME=bdf))

    def recovery(self, bdf: str) -> None:
        """The AER driver's recovery of a fatal or non-fatal error: begun, then done (the device back online)."""
        path = self._path(bdf)
        self.uevents.append(event("change", path, "pci", ERROR_EVENT="BEGIN_RECOVERY", DEVICE_ONLINE="0"))
        self.uevents.append(event("change", path, "pci", ERROR_EVENT="SUCCESSFUL_RECOVERY", DEVICE_ONLINE="1"))

    def bind(self, bdf: str, driver: str, rdma: str | None = None) -> None:
        group, had = self._group_node(bdf)
        super().bind(bdf, driver, rdma)
        if group and not had and self._group_node(bdf)[1]:
            self.uevents.append(event("add", vfio_group(group), "vfio"))
        self.uevents.append(event("bind", self._path(bdf), "pci", DRIVER=driver, PCI_SLOT_NAME=bdf))

    def unbind(self, bdf: str) -> None:
        driver = self.bound_driver(bdf)
        group, had = self._group_node(bdf)
        super().unbind(bdf)
        if driver is None:
            return
        if group and had and not self._group_node(bdf)[1]:
            self.uevents.append(event("remove", vfio_group(group), "vfio"))
        self.uevents.append(event("unbind", self._path(bdf), "pci"))

    def remove_pci_device(self, bdf: str) -> None:
        path, driver = self._path(bdf), self.bound_driver(bdf)
        group, had = self._group_node(bdf)
        super().remove_pci_device(bdf)
        if group and had and not os.path.lexists(self.devnode("vfio", group)):
            self.uevents.append(event("remove", vfio_group(group), "vfio"))
        if driver is not None:
            self.uevents.append(event("unbind", path, "pci", PCI_SLOT_NAME=bdf))
        self.uevents.append(event("remove", path, "pci", PCI_SLOT_NAME=bdf))


def announce(tree: SimTree, *events: dict[str, Any]) -> None:
    """Queue ``events`` on a tree that announces (a write in flight); a plain tree (``sim init``) announces nothing."""
    if isinstance(tree, AnnouncingTree):
        tree.uevents.extend(events)


def pf_changed(tree: SimTree, bdf: str) -> None:
    if isinstance(tree, AnnouncingTree):
        tree.changed(bdf)


def _parse(line: bytes) -> Uevent | None:
    try:
        rec = json.loads(line)
        env = tuple(sorted((str(k), str(v)) for k, v in dict(rec.get("env") or {}).items()))
        return Uevent(str(rec["action"]), str(rec["devpath"]), str(rec["subsystem"]), env)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # not a message: skipped, as a listener skips what it cannot parse


class FeedReader:
    """A listener on the simulated kernel's feed (``fileno`` for ``poll``; :meth:`read` never blocks)."""

    def __init__(self, sim_dir: Path, buffer: int = BUFFER) -> None:
        self.root = Path(sim_dir)
        self.meta = sim_meta_dir(self.root)
        self.path = self.meta / FEED
        self.buffer = buffer
        self.notify = Inotify(Host(self.root))
        self.notify.add(self.meta, CHANGED | IN_MODIFY)
        self.ino, self.at = self._where()  # what comes from now on, as a new netlink socket

    def _where(self) -> tuple[int, int]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return 0, 0
        return st.st_ino, st.st_size

    def fileno(self) -> int:
        return self.notify.fileno()

    def read(self) -> list[Uevent]:
        """The events that came since the last read; :class:`Lost` when the reader fell behind (its
        buffer outrun, or the feed started again): it then goes on from the end."""
        self.notify.read()
        ino, size = self._where()
        if not self.ino and ino:  # the feed's first message since this listener opened
            self.ino = ino
        if ino != self.ino or size < self.at or size - self.at > self.buffer:
            self.ino, self.at = ino, size
            raise Lost("the simulated kernel's uevent feed outran this listener")
        if size == self.at:
            return []
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, size - self.at, self.at)
        finally:
            os.close(fd)
        whole = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        self.at += whole
        return [e for line in data[:whole].splitlines() if (e := _parse(line)) is not None]

    def close(self) -> None:
        self.notify.close()
