"""The libvirt domain elements vgpukit reads and writes, one class per element (see xmlbuilder).

=======================  =====================================================  ==================
class                    element                                                identity (key)
=======================  =====================================================  ==================
:class:`PciAddress`      ``<address [type='pci'] domain= bus= slot= function=>``  its BDF
:class:`PciHostdev`      ``<hostdev mode='subsystem' type='pci'>``               ``pci:<bdf>``
:class:`MdevHostdev`     ``<hostdev mode='subsystem' type='mdev'>``              ``mdev:<uuid>``
:class:`HostdevInterface` ``<interface type='hostdev'>`` (SR-IOV NIC VF)          ``pci:<bdf>``
:class:`DomainXML`       ``<domain>``: its name and the three device kinds above
=======================  =====================================================  ==================

A device's *key* is what attach, detach, ``sriov`` and ``mdev`` compare: the same VF is the same
device whether a domain holds it as ``<hostdev type='pci'>`` or as ``<interface type='hostdev'>``.
:func:`assignments` maps every key to the domains holding it, reading both the live and the
inactive definition of every domain.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ..errors import InvalidInput
from ..host_layout import BDF_RE
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


class DomainXML(XMLBuilder):
    """``<domain>``: its name, and the passed-through devices under ``<devices>``."""

    XML_NAME = "domain"
    name = XMLProperty("./name", STR)

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


@dataclass(frozen=True)
class Assignment:
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
