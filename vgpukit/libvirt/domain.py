"""The libvirt domain elements vgpukit reads and writes, one class per element (see xmlbuilder).

=======================  =====================================================  ==================
class                    element                                                identity (key)
=======================  =====================================================  ==================
:class:`PciAddress`      ``<address [type='pci'] domain= bus= slot= function=>``  its BDF
:class:`PciHostdev`      ``<hostdev mode='subsystem' type='pci'>``               ``pci:<bdf>``
:class:`MdevHostdev`     ``<hostdev mode='subsystem' type='mdev'>``              ``mdev:<uuid>``
:class:`HostdevInterface` ``<interface type='hostdev'>`` (SR-IOV NIC VF)          ``pci:<bdf>``
:class:`DomainXML`       ``<domain>``: its name, vCPUs, memory, NUMA placement and the device kinds above
=======================  =====================================================  ==================

A device's *key* is what attach, detach, ``sriov`` and ``mdev`` compare: the same VF is the same
device whether a domain holds it as ``<hostdev type='pci'>`` or as ``<interface type='hostdev'>``.
:func:`assignments` maps every key to the domains holding it, reading both the live and the
inactive definition of every domain.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, ClassVar, Protocol

import msgspec

from ..errors import InvalidInput
from ..host import BDF_RE
from ..pci import parse_bdf
from .xmlbuilder import INT, ONOFF, STR, YESNO, XMLBuilder, XMLChildProperty, XMLProperty, parse_c_uint

MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


class PciAddress(XMLBuilder):
    """``<address domain= bus= slot= function=/>``; values keep libvirt's hex spelling (``0x3b``)."""

    XML_NAME = "address"
    type = XMLProperty("./@type", STR)
    domain = XMLProperty("./@domain", STR)
    bus = XMLProperty("./@bus", STR)
    slot = XMLProperty("./@slot", STR)
    function = XMLProperty("./@function", STR)

    @classmethod
    def from_bdf(cls, bdf: str, addr_type: str | None = None) -> PciAddress:
        m = BDF_RE.match(parse_bdf(bdf))
        assert m is not None
        addr = cls.blank()
        addr.type = addr_type
        addr.domain, addr.bus, addr.slot, addr.function = (f"0x{g}" for g in m.groups())
        return addr

    @property
    def bdf(self) -> str | None:
        """``0000:3b:02.1``; None when a part is missing or malformed. Numbers read as libvirt does."""
        try:
            d, b, s, f = (parse_c_uint(v or "") for v in (self.domain or "0", self.bus, self.slot, self.function))
        except ValueError:
            return None
        if d > 0xFFFF or b > 0xFF or s > 0x1F or f > 7:
            return None
        return f"{d:04x}:{b:02x}:{s:02x}.{f:x}"


class _Device(XMLBuilder):
    template: ClassVar[str] = ""

    def key(self) -> str | None:
        raise NotImplementedError


class PciHostdev(_Device):
    """``<hostdev type='pci'>``: a PF, a VF, or a VF carrying a vendor-VFIO vGPU (managed='no')."""

    XML_NAME = "hostdev"
    template = "libvirt/hostdev-pci.xml.j2"
    mode = XMLProperty("./@mode", STR)
    kind = XMLProperty("./@type", STR)
    managed = XMLProperty("./@managed", YESNO)
    address = XMLChildProperty(PciAddress, "./source")

    def __init__(self, address: PciAddress, managed: bool = True) -> None:
        self.node = ET.Element(self.XML_NAME)
        self.mode, self.kind, self.managed, self.address = "subsystem", "pci", managed, address

    def key(self) -> str | None:
        bdf = self.address.bdf if self.address is not None else None
        return f"pci:{bdf}" if bdf else None


class MdevHostdev(_Device):
    """``<hostdev type='mdev'>``: a mediated device by UUID (libvirt stores it with managed='no')."""

    XML_NAME = "hostdev"
    template = "libvirt/hostdev-mdev.xml.j2"
    mode = XMLProperty("./@mode", STR)
    kind = XMLProperty("./@type", STR)
    model = XMLProperty("./@model", STR)
    display = XMLProperty("./@display", ONOFF)
    uuid = XMLProperty("./source/address/@uuid", STR)

    def __init__(self, uuid: str, model: str = "vfio-pci", display: bool = False) -> None:
        self.node = ET.Element(self.XML_NAME)
        self.mode, self.kind, self.model, self.display, self.uuid = "subsystem", "mdev", model, display, uuid

    def key(self) -> str | None:
        return f"mdev:{self.uuid.lower()}" if self.uuid else None


class HostdevInterface(_Device):
    """``<interface type='hostdev'>``: an SR-IOV NIC VF with an optional MAC and VLAN tag."""

    XML_NAME = "interface"
    template = "libvirt/interface-hostdev.xml.j2"
    kind = XMLProperty("./@type", STR)
    managed = XMLProperty("./@managed", YESNO)
    mac = XMLProperty("./mac/@address", STR)
    address = XMLChildProperty(PciAddress, "./source")
    vlan = XMLProperty("./vlan/tag/@id", INT)

    def __init__(
        self, address: PciAddress, mac: str | None = None, vlan: int | None = None, managed: bool = True
    ) -> None:
        if mac is not None and not MAC_RE.match(mac):
            raise InvalidInput(f"invalid MAC address {mac!r}: expected 6 lower-case hex pairs", value=mac)
        if vlan is not None and not 0 <= vlan <= 4095:
            raise InvalidInput(f"invalid VLAN id {vlan}: expected 0..4095", value=vlan)
        self.node = ET.Element(self.XML_NAME)
        self.kind, self.managed, self.mac = "hostdev", managed, mac
        self.address = address
        if self.address is not None:
            self.address.type = "pci"  # required on an interface's source address
        self.vlan = vlan

    def key(self) -> str | None:
        addr = self.address
        if addr is None or (addr.type or "pci") != "pci" or not addr.bdf:
            return None
        return f"pci:{addr.bdf}"


Device = PciHostdev | MdevHostdev | HostdevInterface


def device_of(el: ET.Element) -> Device | None:
    """The model object for a device element vgpukit knows, or None (disks, other hostdevs...)."""
    if el.tag == "hostdev" and el.get("mode", "subsystem") == "subsystem":
        if el.get("type") == "pci":
            return PciHostdev.wrap(el)
        if el.get("type") == "mdev":
            return MdevHostdev.wrap(el)
    if el.tag == "interface" and el.get("type") == "hostdev":
        return HostdevInterface.wrap(el)
    return None


def parse_device(xml: str) -> Device:
    """One device element (e.g. a rendered template). InvalidInput unless it is one vgpukit knows."""
    try:
        el = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise InvalidInput(f"cannot parse device XML: {exc}") from exc
    dev = device_of(el)
    if dev is None or dev.key() is None:
        raise InvalidInput(f"<{el.tag}> is not a PCI/mdev hostdev or hostdev interface with an address")
    return dev


# libvirt's memory units (docs: formatdomain "Memory Allocation"): k/KiB are 1024, KB is 1000...
_MEMORY_UNITS = {"b": 1, "bytes": 1} | {
    u: base**p
    for p, letter in enumerate("kmgtpe", 1)
    for u, base in ((letter, 1024), (letter + "ib", 1024), (letter + "b", 1000))
}


class DomainXML(XMLBuilder):
    """``<domain>``: its name, vCPUs, memory, placement, and the passed-through devices under ``<devices>``."""

    XML_NAME = "domain"
    name = XMLProperty("./name", STR)
    vcpus = XMLProperty("./vcpu", INT)
    vcpu_placement = XMLProperty("./vcpu/@placement", STR)
    vcpu_cpuset = XMLProperty("./vcpu/@cpuset", STR)
    numa_mode = XMLProperty("./numatune/memory/@mode", STR)
    numa_nodeset = XMLProperty("./numatune/memory/@nodeset", STR)

    @property
    def memory_mib(self) -> int | None:
        """``<memory unit=...>`` in MiB (libvirt's default unit is KiB), or None when absent or unreadable."""
        el = self.node.find("memory")
        if el is None or not (el.text or "").strip():
            return None
        scale = _MEMORY_UNITS.get((el.get("unit") or "KiB").lower())
        try:
            value = parse_c_uint(el.text or "")
        except ValueError:
            return None
        return None if scale is None else value * scale >> 20

    def pins(self) -> list[tuple[int, str]]:
        """``<cputune><vcpupin vcpu= cpuset=>``: (vCPU, CPU set) in document order."""
        return [
            (parse_c_uint(el.get("vcpu") or "0"), el.get("cpuset") or "") for el in self.node.findall("cputune/vcpupin")
        ]

    def set_pins(self, pins: list[tuple[int, int]]) -> None:
        """Replace every vCPU pin (other ``<cputune>`` settings stay); no pins and nothing else: no ``<cputune>``."""
        tune = self.node.find("cputune")
        if tune is None:
            if not pins:
                return
            tune = self._insert_after("cputune", "vcpu")
        for el in tune.findall("vcpupin"):
            tune.remove(el)
        for i, (vcpu, cpu) in enumerate(pins):
            tune.insert(i, ET.Element("vcpupin", {"vcpu": str(vcpu), "cpuset": str(cpu)}))
        if not len(tune) and not tune.attrib:
            self.node.remove(tune)

    def place(self, cpuset: str, numa_node: int, pins: list[tuple[int, int]]) -> None:
        """vCPUs on ``cpuset`` (pinned one by one when ``pins``), memory bound to ``numa_node``."""
        self.vcpu_placement, self.vcpu_cpuset = "static", cpuset
        self.set_pins(pins)
        if self.node.find("numatune") is None:
            self._insert_after("numatune", "cputune", "vcpu")
        self.numa_mode, self.numa_nodeset = "strict", str(numa_node)

    def set_hugepages(self) -> None:
        """``<memoryBacking><hugepages/>`` (kept as it is when the domain has it)."""
        backing = self.node.find("memoryBacking")
        if backing is None:
            backing = self._insert_after("memoryBacking", "currentMemory", "memory")
        if backing.find("hugepages") is None:
            backing.insert(0, ET.Element("hugepages"))

    def _insert_after(self, tag: str, *after: str) -> ET.Element:
        """A new child ``tag`` right after the first existing one of ``after`` (else at the end)."""
        el = ET.Element(tag)
        children = list(self.node)
        for name in after:
            found = self.node.find(name)
            if found is not None:
                self.node.insert(children.index(found) + 1, el)
                return el
        self.node.append(el)
        return el

    def devices(self) -> list[Device]:
        holder = self.node.find("devices")
        return [d for el in (holder if holder is not None else []) if (d := device_of(el)) is not None]

    def keyed(self) -> dict[str, Device]:
        """key -> device for every passed-through device with a valid identity (first one wins)."""
        out: dict[str, Device] = {}
        for dev in self.devices():
            key = dev.key()
            if key is not None:
                out.setdefault(key, dev)
        return out

    def add_device(self, dev: Device) -> None:
        holder = self.node.find("devices")
        if holder is None:
            holder = ET.SubElement(self.node, "devices")
        holder.append(dev.node)

    def remove_devices(self, keys: set[str]) -> None:
        holder = self.node.find("devices")
        for dev in self.devices():
            if holder is not None and dev.key() in keys:
                holder.remove(dev.node)


def device_keys(xml: str) -> set[str]:
    """The keys of every passed-through device in a domain's XML."""
    return set(DomainXML.parse(xml).keyed())


# ----------------------------------------------------------------------------- assignments
class DomainSource(Protocol):
    """What :func:`assignments` needs of a connection (the facade, or a test double)."""

    def domains(self) -> list[Any]: ...  # items with .name, .active, .persistent

    def xml(self, name: str, inactive: bool = False) -> str: ...


class Assignment(msgspec.Struct, frozen=True):
    domain: str
    active: bool  # the domain is running

    @property
    def state(self) -> str:
        return "running" if self.active else "defined"


def assignments(source: DomainSource, skip: str | None = None) -> dict[str, list[Assignment]]:
    """key -> every domain (but ``skip``) whose live or inactive definition holds that device."""
    out: dict[str, list[Assignment]] = {}
    for info in source.domains():
        if info.name == skip:
            continue
        keys = device_keys(source.xml(info.name))
        if info.active and getattr(info, "persistent", False):
            keys |= device_keys(source.xml(info.name, inactive=True))
        for key in sorted(keys):
            out.setdefault(key, []).append(Assignment(info.name, bool(info.active)))
    return out
