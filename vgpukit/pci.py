"""PCI devices as the kernel reports them: validation, records, and the sysfs reader.

Records (:class:`PciDevice`, :class:`Sriov`, :class:`Link`) are plain data; only :func:`scan` and
:func:`read_device` touch the host, and only through :class:`vgpukit.host.Host`.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .data import pci_names
from .errors import InvalidInput, NotFound
from .host import Host

BDF_RE = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])\Z", re.ASCII)
SHORT_BDF_RE = re.compile(r"^([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])\Z", re.ASCII)
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


def kind_of(class_code: int, vendor: int) -> str:
    base, sub = class_code >> 16, (class_code >> 8) & 0xFF
    if base == 0x03:
        return "gpu"
    if base == 0x02:
        return "nic"
    if base == 0x01 and sub == 0x08:
        return "nvme"
    if base == 0x06 and sub in (0x04, 0x09):
        return "bridge"
    return "other"


@dataclass(frozen=True)
class Link:
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


@dataclass(frozen=True)
class Sriov:
    total_vfs: int
    num_vfs: int
    vf_device: str | None
    autoprobe: bool
    offset: int | None
    stride: int | None
    vfs: tuple[str, ...] = ()


@dataclass(frozen=True)
class PciDevice:
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
    driver_override: str | None = None
    sriov: Sriov | None = None
    physfn: str | None = None
    mdev_types: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ids(self) -> str:
        return f"{self.vendor}:{self.device}"

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["class"] = f"0x{self.class_code:06x}"
        del d["class_code"]
        d["ids"] = self.ids
        d["parents"] = list(self.parents)
        d["mdev_types"] = list(self.mdev_types)
        if self.sriov:
            d["sriov"]["vfs"] = list(self.sriov.vfs)
        return d


def _hex(text: str | None) -> str:
    if not text:
        return "0000"
    return text.lower().removeprefix("0x").zfill(4)


def read_device(host: Host, bdf: str) -> PciDevice:
    """Everything sysfs says about one device."""
    d = host.pci_device(bdf)
    if not host.exists(d):
        raise NotFound(f"no PCI device {bdf}", device=bdf, path=host.display(d))
    vendor = _hex(host.read_opt(d / "vendor"))
    device = _hex(host.read_opt(d / "device"))
    class_code = host.read_int(d / "class", 0) or 0
    subsys = host.read_opt(d / "subsystem_vendor")
    subdev = host.read_opt(d / "subsystem_device")
    real = host.resolve(d)
    chain = [p for p in real.parts]
    hb_index = next((i for i, p in enumerate(chain) if HOST_BRIDGE_RE.match(p)), None)
    host_bridge = chain[hb_index] if hb_index is not None else "pci?"
    below = chain[hb_index + 1 :] if hb_index is not None else []
    parents = tuple(p for p in below[:-1] if BDF_RE.match(p))
    numa = host.read_int(d / "numa_node")
    group = host.link_name(d / "iommu_group")
    sriov = None
    if host.exists(d / "sriov_totalvfs"):
        total = host.read_int(d / "sriov_totalvfs", 0) or 0
        sriov = Sriov(
            total_vfs=total,
            num_vfs=host.read_int(d / "sriov_numvfs", 0) or 0,
            vf_device=host.read_opt(d / "sriov_vf_device"),
            autoprobe=(host.read_opt(d / "sriov_drivers_autoprobe", "1") == "1"),
            offset=host.read_int(d / "sriov_offset", None, 10),
            stride=host.read_int(d / "sriov_stride", None, 10),
            vfs=tuple(virtfns(host, bdf)),
        )
    physfn = host.link_name(d / "physfn")
    mdev_types = tuple(host.listdir(d / "mdev_supported_types"))
    override = host.read_opt(d / "driver_override")
    return PciDevice(
        bdf=bdf,
        vendor=vendor,
        device=device,
        class_code=class_code,
        kind=kind_of(class_code, int(vendor, 16)),
        name=_name(host, bdf, vendor, device),
        driver=host.link_name(d / "driver"),
        numa_node=numa if numa is not None and numa >= 0 else None,
        iommu_group=int(group) if group and group.isdigit() else None,
        link=Link(
            speed=host.read_opt(d / "current_link_speed"),
            width=host.read_int(d / "current_link_width", None, 10),
            max_speed=host.read_opt(d / "max_link_speed"),
            max_width=host.read_int(d / "max_link_width", None, 10),
        ),
        local_cpulist=host.read_opt(d / "local_cpulist"),
        parents=parents,
        host_bridge=host_bridge,
        subsystem=f"{_hex(subsys)}:{_hex(subdev)}" if subsys else None,
        driver_override=None if override in (None, "", "(null)") else override,
        sriov=sriov,
        physfn=physfn,
        mdev_types=mdev_types,
    )


def vf_address(pf: str, offset: int, stride: int, n: int) -> str:
    """VF ``n``'s address: the PF's routing ID + offset + stride * n (PCIe SR-IOV, section 9.3.3.9)."""
    m = BDF_RE.match(pf)
    if not m:
        raise InvalidInput(f"invalid PCI address {pf!r}", value=pf)
    dom, bus, dev, fn = (int(g, 16) for g in m.groups())
    rid = (bus << 8 | dev << 3 | fn) + offset + stride * n
    return f"{dom:04x}:{rid >> 8 & 0xFF:02x}:{rid >> 3 & 0x1F:02x}.{rid & 7}"


def virtfns(host: Host, pf: str) -> list[str]:
    """The PF's VFs in index order, from its ``virtfnN`` links."""
    d = host.pci_device(pf)
    names = sorted((n for n in host.listdir(d) if n.startswith("virtfn")), key=lambda n: int(n[6:] or 0))
    return [b for n in names if (b := host.link_name(d / n))]


def _name(host: Host, bdf: str, vendor: str, device: str) -> str:
    if pci_names.known(vendor, device) or str(host.root) != "/":
        return pci_names.device_name(vendor, device)
    from .udev import hwdb_name

    return hwdb_name(bdf) or pci_names.device_name(vendor, device)


def list_bdfs(host: Host) -> list[str]:
    return sorted((n for n in host.listdir(host.sys("bus", "pci", "devices")) if BDF_RE.match(n)), key=bdf_sort_key)


def scan(host: Host) -> list[PciDevice]:
    """All PCI devices, in bus order."""
    return [read_device(host, bdf) for bdf in list_bdfs(host)]


def iommu_group_members(host: Host, group: int) -> list[str]:
    return host.listdir(host.sys("kernel", "iommu_groups", str(group), "devices"))


def device_basename(path: str) -> str:
    return os.path.basename(path.rstrip("/"))
