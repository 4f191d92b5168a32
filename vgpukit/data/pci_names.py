"""Human names of PCI devices, from the system's PCI ID database.

Where the names come from, first found wins (each path under the host's root, read through the host
door, so a simulated host can carry its own database):

1. ``/usr/share/misc/pci.ids`` (Debian's ``pci.ids`` package; ``lspci`` reads it) or
   ``/usr/share/hwdata/pci.ids``,
2. the udev hardware database's text source ``/usr/lib/udev/hwdb.d/20-pci-vendor-model.hwdb``
   (shipped with udev; what ``ID_MODEL_FROM_DATABASE`` comes from),
3. vgpukit's own ``pci-ids.json``: the fallback when neither exists, and for the devices a database
   is too old to know (a GPU newer than the host's ``pci.ids``).

The database is mapped, not parsed: each lookup searches it in place for the one vendor, device
and subsystem line it needs. A :class:`PciNames` lives as long as one command's PCI scan.
"""

from __future__ import annotations

import mmap
import re
from typing import TYPE_CHECKING

from . import load_json

if TYPE_CHECKING:
    from ..host import Host

PCI_IDS = ("usr/share/misc/pci.ids", "usr/share/hwdata/pci.ids")
HWDB = ("usr/lib/udev/hwdb.d/20-pci-vendor-model.hwdb", "lib/udev/hwdb.d/20-pci-vendor-model.hwdb")
Names = tuple[str | None, str | None, str | None]  # vendor, device, subsystem
_TOP_LEVEL = re.compile(rb"\n[^\t#\n]")  # the next vendor (or class) line of pci.ids
_DEVICE_LEVEL = re.compile(rb"\n(?:\t[^\t#]|[^\t#\n])")  # the next device or vendor line


def builtin_name(vendor: str, device: str) -> tuple[str | None, str | None]:
    """(vendor, device) names from vgpukit's own list; None where it has none."""
    entry = load_json("pci-ids.json").get("vendors", {}).get(vendor)
    if not entry:
        return None, None
    dev = (entry.get("devices") or {}).get(device)
    return str(entry.get("short", entry["name"])), None if dev is None else str(dev)


def _line(db: mmap.mmap, key: bytes, start: int = 0, end: int | None = None) -> tuple[str, int] | None:
    """The rest of the line that starts with ``key`` (searched between start and end), and its end."""
    at = db.find(key, start, len(db) if end is None else end)
    if at < 0:
        return None
    stop = db.find(b"\n", at + len(key))
    stop = len(db) if stop < 0 else stop
    return db[at + len(key) : stop].decode("utf-8", "replace").strip(), stop


class PciNames:
    """Vendor, device and subsystem names for one command (the database is opened on first use)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._db: mmap.mmap | None = None
        self._kind = ""  # "pci.ids" | "hwdb" | "builtin" once opened
        self._vendors: dict[str, tuple[str, int, int] | None] = {}  # pci.ids: name, block start, end
        self._seen: dict[tuple[str, str, str | None], Names] = {}  # a host has few distinct ids

    @property
    def source(self) -> str:
        """Which database names come from: ``pci.ids``, ``hwdb`` or ``builtin``."""
        self._open()
        return self._kind

    def _open(self) -> None:
        if self._kind:
            return
        from ..errors import VgpukitError

        self._kind = "builtin"
        for kind, paths in (("pci.ids", PCI_IDS), ("hwdb", HWDB)):
            for rel in paths:
                try:
                    db = self.host.map_opt(self.host.path(rel))
                except VgpukitError:  # unreadable, or a link out of the host's root: not this one
                    db = None
                if db is not None:
                    self._db, self._kind = db, kind
                    return

    def lookup(self, vendor: str, device: str, subsystem: str | None = None) -> Names:
        """(vendor, device, subsystem) names from the database; None for each it does not have.
        Ids are 4 lower-case hex digits; ``subsystem`` is ``vvvv:dddd``."""
        self._open()
        db = self._db
        if db is None:
            return None, None, None
        key = (vendor, device, subsystem)
        if key not in self._seen:
            self._seen[key] = _hwdb(db, *key) if self._kind == "hwdb" else self._pci_ids(db, *key)
        return self._seen[key]

    def _vendor(self, db: mmap.mmap, vendor: str) -> tuple[str, int, int] | None:
        """The vendor's name and the span of its block in pci.ids (each vendor searched once)."""
        if vendor not in self._vendors:
            v = _line(db, b"\n" + vendor.encode() + b"  ")
            m = _TOP_LEVEL.search(db, v[1]) if v else None
            self._vendors[vendor] = (v[0], v[1], m.start() if m else len(db)) if v else None
        return self._vendors[vendor]

    def _pci_ids(self, db: mmap.mmap, vendor: str, device: str, subsystem: str | None) -> Names:
        v = self._vendor(db, vendor)
        if v is None:
            return None, None, None
        name, start, v_end = v
        d = _line(db, b"\n\t" + device.encode() + b"  ", start, v_end)
        if d is None:
            return name, None, None
        sub = None
        if subsystem:
            m = _DEVICE_LEVEL.search(db, d[1], v_end)
            key = b"\n\t\t" + subsystem.replace(":", " ").encode() + b"  "
            s = _line(db, key, d[1], m.start() if m else v_end)
            sub = s[0] if s else None
        return name, d[0], sub

    def device_name(self, vendor: str, device: str) -> str:
        """``<vendor> <device>`` as ``lspci`` shows it, e.g. ``NVIDIA Corporation TU104GL [Tesla T4]``."""
        vendor, device = vendor.lower(), device.lower()
        v, d, _ = self.lookup(vendor, device)
        if d is None:  # no database, or one too old to know this device
            bv, d = builtin_name(vendor, device)
            v = v or bv
        if v is None:
            return f"[{vendor}:{device}]"
        return f"{v} {d}" if d else f"{v} device {device}"

    def subsystem_name(self, vendor: str, device: str, subsystem: str | None) -> str | None:
        """The board's name (pci.ids' subsystem line for this device), when the database has one."""
        if not subsystem:
            return None
        return self.lookup(vendor.lower(), device.lower(), subsystem.lower())[2]


def _hwdb(db: mmap.mmap, vendor: str, device: str, subsystem: str | None) -> Names:
    """Names from udev's hwdb text: ``pci:v0000VVVV*`` / ``pci:v0000VVVVd0000DDDD*`` /
    ``...sv0000SSSSsd0000SSSS*`` records, each followed by its ``ID_..._FROM_DATABASE=`` line."""
    base = f"\npci:v0000{vendor.upper()}"
    names: list[str | None] = []
    keys = [f"{base}*\n", f"{base}d0000{device.upper()}*\n"]
    if subsystem:
        sv, sd = subsystem.upper().split(":")
        keys.append(f"{base}d0000{device.upper()}sv0000{sv}sd0000{sd}*\n")
    fields = (b" ID_VENDOR_FROM_DATABASE=", b" ID_MODEL_FROM_DATABASE=", b" ID_MODEL_FROM_DATABASE=")
    for key, field in zip(keys, fields[: len(keys)], strict=True):
        at = db.find(key.encode())
        hit = _line(db, field, at + len(key), at + len(key) + len(field)) if at >= 0 else None
        names.append(hit[0] if hit else None)
    names += [None] * (3 - len(names))
    return names[0], names[1], names[2]
