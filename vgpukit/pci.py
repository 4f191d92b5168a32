"""PCI devices as the kernel reports them: validation, records, and the sysfs reader.

Records (:class:`PciDevice`, :class:`Sriov`, :class:`Link`) are plain data; only :func:`read_device`
and the per-command snapshot :class:`Scan` touch the host, and only through :class:`vgpukit.host.Host`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from .data.pci_names import PciNames
from .errors import InvalidInput, NotFound
from .host import (
    BDF_RE,
    BOOT_VGA,
    DRIVER,
    DRIVER_OVERRIDE,
    INFINIBAND,
    IOMMU_GROUP,
    MDEV_TYPES,
    PHYSFN,
    SHORT_BDF_RE,
    SRIOV_AUTOPROBE,
    SRIOV_NUMVFS,
    SRIOV_OFFSET,
    SRIOV_STRIDE,
    SRIOV_TOTALVFS,
    SRIOV_VF_DEVICE,
    VIRTFN,
    Host,
)
from .pci_kind import hex_id, kind_of, read_kind

if TYPE_CHECKING:
    from .host import DirFiles

HOST_BRIDGE_RE = re.compile(r"^pci([0-9a-f]{4}):([0-9a-f]{2})\Z", re.ASCII)


def parse_bdf(text: str) -> str:
    """Canonical ``DDDD:BB:DD.F`` from a full or short (``BB:DD.F``) address; InvalidInput otherwise."""
    t = text.strip().lower()
    if BDF_RE.match(t):
        return t
    if SHORT_BDF_RE.match(t):
        return "0000:" + t
    raise InvalidInput(f"invalid PCI address {text!r}: expected DDDD:BB:DD.F, e.g. 0000:3b:00.0", value=text)


def is_bdf(text: str) -> bool:
    t = text.strip().lower()
    return bool(BDF_RE.match(t) or SHORT_BDF_RE.match(t))


def bdf_sort_key(bdf: str) -> tuple[int, int, int, int]:
    m = BDF_RE.match(bdf)
    if not m:
        return (0xFFFF, 0xFF, 0xFF, 0xF)
    return (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16))


class Link(msgspec.Struct, frozen=True):
    speed: str | None = None
    width: int | None = None
    max_speed: str | None = None
    max_width: int | None = None

    def describe(self) -> str:
        if not self.speed:
            return "-"
        gts = self.speed.replace(" PCIe", "")
        text = f"{gts} x{self.width}" if self.width else gts
        if self.max_speed and (self.max_speed != self.speed or self.max_width != self.width):
            text += (
                " (max " + self.max_speed.replace(" PCIe", "") + (f" x{self.max_width}" if self.max_width else "") + ")"
            )
        return text


class Sriov(msgspec.Struct, frozen=True):
    total_vfs: int
    num_vfs: int
    vf_device: str | None
    autoprobe: bool
    offset: int | None
    stride: int | None
    vfs: tuple[str, ...] = ()


class PciDevice(msgspec.Struct, frozen=True):
    bdf: str
    vendor: str  # "10de"
    device: str  # "20b0"
    class_code: int
    kind: str
    name: str
    driver: str | None
    numa_node: int | None
    iommu_group: int | None
    link: Link
    local_cpulist: str | None
    parents: tuple[str, ...]  # ancestor BDFs from the root port down (nearest last)
    host_bridge: str  # "pci0000:00"
    subsystem: str | None = None
    subsystem_name: str | None = None  # the board, where the PCI ID database names it
    driver_override: str | None = None
    sriov: Sriov | None = None
    physfn: str | None = None
    mdev_types: tuple[str, ...] = ()
    boot_vga: bool = False  # the firmware's console display device (sysfs boot_vga = 1)
    extra: dict[str, Any] = {}

    @property
    def ids(self) -> str:
        return f"{self.vendor}:{self.device}"

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None

    def to_dict(self) -> dict[str, Any]:  # a reshape: class_code as a hex class, adds ids
        d: dict[str, Any] = msgspec.to_builtins(self)
        d["class"] = f"0x{self.class_code:06x}"
        del d["class_code"]
        d["ids"] = self.ids
        return d


def _chain(host: Host, dev_link: Path) -> tuple[str, tuple[str, ...]]:
    """(host bridge, ancestor BDFs) from where ``/sys/bus/pci/devices/<bdf>`` leads.

    The link's own target names the hierarchy (``../../../devices/pci0000:00/0000:00:01.0/<bdf>``),
    so one readlink does; a tree without such links (a copied root) is resolved instead.
    """
    target = host.device_path(dev_link)
    parts = target.split("/") if target else []
    if not any(HOST_BRIDGE_RE.match(p) for p in parts):
        parts = list(host.resolve(dev_link).parts)
    hb_index = next((i for i, p in enumerate(parts) if HOST_BRIDGE_RE.match(p)), None)
    if hb_index is None:
        return "pci?", ()
    below = parts[hb_index + 1 :]
    return parts[hb_index], tuple(p for p in below[:-1] if BDF_RE.match(p))


def read_device(
    host: Host, bdf: str, names: PciNames | None = None, listing: dict[str, frozenset[str]] | None = None
) -> PciDevice:
    """Everything sysfs says about one device: one listing (kept in ``listing``), then only what is there."""
    d = host.pci_device(bdf)
    with host.files(d) as files:
        if listing is not None:
            listing[bdf] = files.names
        return _read_device(host, bdf, d, files, names or PciNames(host))


def _read_device(host: Host, bdf: str, d: Path, files: DirFiles, names: PciNames) -> PciDevice:
    entries = files.names
    if not entries:
        raise NotFound(f"no PCI device {bdf}", device=bdf, path=host.display(d))
    base = f"{d}/"
    attr, link = files.read, files.link_name

    def number(name: str, base_: int = 0) -> int | None:
        text = files.read(name)
        try:
            return int(text, base_) if text else None
        except ValueError:
            return None

    vendor, device = hex_id(attr("vendor")), hex_id(attr("device"))
    class_code = number("class") or 0
    subsys = attr("subsystem_vendor")
    subsystem = f"{hex_id(subsys)}:{hex_id(attr('subsystem_device'))}" if subsys else None
    host_bridge, parents = _chain(host, d)
    numa = number("numa_node")
    group = link(IOMMU_GROUP)
    sriov = None
    if SRIOV_TOTALVFS in entries:
        sriov = Sriov(
            total_vfs=number(SRIOV_TOTALVFS) or 0,
            num_vfs=number(SRIOV_NUMVFS) or 0,
            vf_device=attr(SRIOV_VF_DEVICE),
            autoprobe=attr(SRIOV_AUTOPROBE, "1") == "1",
            offset=(offset := number(SRIOV_OFFSET, 10)),
            stride=(stride := number(SRIOV_STRIDE, 10)),
            vfs=tuple(virtfns_listed(host, bdf, base, entries, offset, stride)),
        )
    override = attr(DRIVER_OVERRIDE)
    return PciDevice(
        bdf=bdf,
        vendor=vendor,
        device=device,
        class_code=class_code,
        kind=kind_of(class_code, int(vendor, 16), (boot_vga := attr(BOOT_VGA) == "1")),
        name=names.device_name(vendor, device),
        driver=link(DRIVER),
        numa_node=numa if numa is not None and numa >= 0 else None,
        iommu_group=int(group) if group and group.isdigit() else None,
        link=Link(
            speed=attr("current_link_speed"),
            width=number("current_link_width", 10),
            max_speed=attr("max_link_speed"),
            max_width=number("max_link_width", 10),
        ),
        local_cpulist=attr("local_cpulist"),
        parents=parents,
        host_bridge=host_bridge,
        subsystem=subsystem,
        subsystem_name=names.subsystem_name(vendor, device, subsystem),
        driver_override=None if override in (None, "", "(null)") else override,
        sriov=sriov,
        physfn=link(PHYSFN),
        mdev_types=tuple(host.listdir(base + MDEV_TYPES)) if MDEV_TYPES in entries else (),
        boot_vga=boot_vga,
    )


def vf_address(pf: str, offset: int, stride: int, n: int) -> str:
    """VF ``n``'s address: the PF's routing ID + offset + stride * n (PCIe SR-IOV, section 9.3.3.9)."""
    return vf_addresses(pf, offset, stride, [n])[0]


def vf_addresses(pf: str, offset: int, stride: int, ns: list[int]) -> list[str]:
    """:func:`vf_address` of each VF index in ``ns`` (the PF's address parsed once)."""
    m = BDF_RE.match(pf)
    if not m:
        raise InvalidInput(f"invalid PCI address {pf!r}", value=pf)
    dom, bus, dev, fn = (int(g, 16) for g in m.groups())
    first = (bus << 8 | dev << 3 | fn) + offset
    out = []
    for n in ns:
        rid = first + stride * n
        out.append(f"{dom:04x}:{rid >> 8 & 0xFF:02x}:{rid >> 3 & 0x1F:02x}.{rid & 7}")
    return out


def virtfns_listed(
    host: Host,
    pf: str,
    base: str,
    entries: set[str] | frozenset[str] | list[str],
    offset: int | None,
    stride: int | None,
) -> list[str]:
    """The VFs of ``pf`` whose ``virtfnN`` link is present, in index order. Where each link leads is
    fixed by the PF's offset and stride (:func:`vf_address`, as the kernel places them), so no link
    needs reading unless the PF does not show them."""
    ns = sorted(int(n[len(VIRTFN) :]) for n in entries if n.startswith(VIRTFN) and n[len(VIRTFN) :].isdigit())
    if offset is not None and stride is not None and offset > 0:
        return vf_addresses(pf, offset, stride, ns)
    return [b for n in ns if (b := host.link_name(f"{base}{VIRTFN}{n}"))]


def virtfns(host: Host, pf: str) -> list[str]:
    """The PF's VFs in index order (those whose ``virtfnN`` link is present)."""
    d = host.pci_device(pf)
    offset = host.read_int(d / SRIOV_OFFSET, None, 10)
    stride = host.read_int(d / SRIOV_STRIDE, None, 10)
    return virtfns_listed(host, pf, f"{d}/", host.listdir(d), offset, stride)


def rdma_devices(host: Host, bdf: str) -> list[str]:
    """The RDMA devices (``mlx5_0``) the function's driver registered, as ``/sys/class/infiniband`` names them."""
    return host.listdir(host.pci_device(bdf) / INFINIBAND)


def list_bdfs(host: Host) -> list[str]:
    # canonical names (lower-case, fixed width) sort as text in address order: no key to compute
    return sorted(n for n in host.listdir(host.pci_devices()) if BDF_RE.match(n))


class Scan:
    """One command's snapshot of the host's PCI functions, each read at most once and only when asked.

    A command builds one and hands it to whatever needs devices (naming, aliases, listings), so
    nothing is read twice; after a change the command made, it builds a new one. Never kept
    anywhere else (no module-level caches).
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self._bdfs: list[str] | None = None
        self._bdf_set: set[str] = set()
        self._read: dict[str, PciDevice] = {}
        self._entries: dict[str, frozenset[str]] = {}  # bdf -> its sysfs directory's entries, as read
        self._physical: list[PciDevice] | None = None
        self._kinds: list[tuple[str, str, str]] | None = None
        self.names = PciNames(host)  # device names, from the host's PCI ID database

    def bdfs(self) -> list[str]:
        """Every PCI function's address, in bus order."""
        if self._bdfs is None:
            self._bdfs = list_bdfs(self.host)
            self._bdf_set = set(self._bdfs)
        return self._bdfs

    def exists(self, bdf: str) -> bool:
        if bdf in self._read:
            return True
        if self._bdfs is not None:
            return bdf in self._bdf_set
        return self.host.exists(self.host.pci_device(bdf))

    def device(self, bdf: str) -> PciDevice:
        dev = self._read.get(bdf)
        if dev is None:
            dev = self._read[bdf] = read_device(self.host, bdf, self.names, self._entries)
        return dev

    def entries(self, bdf: str) -> frozenset[str]:
        """The names in the device's sysfs directory, as :meth:`device` listed them."""
        if bdf not in self._entries:
            self.device(bdf)
        return self._entries.get(bdf, frozenset())

    def devices(self) -> list[PciDevice]:
        """All PCI functions (VFs included), in bus order."""
        return [self.device(b) for b in self.bdfs()]

    def physical(self) -> list[PciDevice]:
        """Every function that is not a VF, in bus order. VFs are known from their PF (which precedes
        them in bus order: a VF's routing ID is its PF's plus an offset), so they are not read."""
        if self._physical is None:
            vfs: set[str] = set()
            out = []
            for bdf in self.bdfs():
                if bdf in vfs:
                    continue
                dev = self.device(bdf)
                if dev.sriov is not None:
                    vfs.update(dev.sriov.vfs)
                if not dev.is_vf:
                    out.append(dev)
            self._physical = out
        return self._physical

    def kinds(self, *, light: bool = False) -> list[tuple[str, str, str]]:
        """(bdf, vendor, kind) of every function that is not a VF, in bus order (what the aliases need).
        ``light``: for a command that reads no more of the devices (``mig status``), a few attributes of
        each function not read yet (:func:`read_kind`) instead of the whole records (:meth:`physical`)."""
        if self._kinds is None:
            if self._physical is not None or not light:
                self._kinds = [(d.bdf, d.vendor, d.kind) for d in self.physical()]
            else:
                read = ((b, self._kind(b)) for b in self.bdfs())
                self._kinds = [(b, *k) for b, k in read if k is not None]
        return self._kinds

    def _kind(self, bdf: str) -> tuple[str, str] | None:
        dev = self._read.get(bdf)
        if dev is None:
            return read_kind(self.host, bdf)
        return None if dev.is_vf else (dev.vendor, dev.kind)


def device_basename(path: str) -> str:
    return os.path.basename(path.rstrip("/"))
