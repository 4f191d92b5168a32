"""libvirt XML as data: one small record per element, each naming the template that renders it.

Records are plain data (no I/O). :mod:`vgpukit.attach.templates` renders them; the identity
helpers (:meth:`key`) let the attach logic find a device in a domain's XML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import InvalidInput
from ..pci import BDF_RE, parse_bdf

MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}\Z", re.ASCII)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}\Z", re.ASCII)


@dataclass(frozen=True)
class PciAddress:
    """``<address domain= bus= slot= function=/>`` with libvirt's hex spelling."""

    domain: str
    bus: str
    slot: str
    function: str

    @classmethod
    def from_bdf(cls, bdf: str) -> PciAddress:
        m = BDF_RE.match(parse_bdf(bdf))
        assert m is not None
        return cls(f"0x{m.group(1)}", f"0x{m.group(2)}", f"0x{m.group(3)}", f"0x{m.group(4)}")

    @property
    def bdf(self) -> str:
        return f"{int(self.domain, 16):04x}:{int(self.bus, 16):02x}:{int(self.slot, 16):02x}.{int(self.function, 16):x}"


@dataclass(frozen=True)
class PciHostdev:
    """``<hostdev type='pci'>``: a PF, a VF, or a VF carrying a vendor-VFIO vGPU (managed='no')."""

    template = "libvirt/hostdev-pci.xml.j2"
    address: PciAddress
    managed: bool = True

    def key(self) -> str:
        return f"pci:{self.address.bdf}"


@dataclass(frozen=True)
class MdevHostdev:
    """``<hostdev type='mdev'>``: a mediated device by UUID."""

    template = "libvirt/hostdev-mdev.xml.j2"
    uuid: str
    model: str = "vfio-pci"
    display: bool = False

    def key(self) -> str:
        return f"mdev:{self.uuid}"


@dataclass(frozen=True)
class HostdevInterface:
    """``<interface type='hostdev'>``: an SR-IOV NIC VF with an optional MAC and VLAN tag."""

    template = "libvirt/interface-hostdev.xml.j2"
    address: PciAddress
    mac: str | None = None
    vlan: int | None = None
    managed: bool = True

    def __post_init__(self) -> None:
        if self.mac is not None and not MAC_RE.match(self.mac):
            raise InvalidInput(f"invalid MAC address {self.mac!r}: expected 6 lower-case hex pairs", value=self.mac)
        if self.vlan is not None and not 0 <= self.vlan <= 4095:
            raise InvalidInput(f"invalid VLAN id {self.vlan}: expected 0..4095", value=self.vlan)

    def key(self) -> str:
        return f"pci:{self.address.bdf}"


Device = PciHostdev | MdevHostdev | HostdevInterface


@dataclass(frozen=True)
class Firmware:
    """``efi``: libvirt picks OVMF from the firmware descriptors; ``pflash``: explicit OVMF files;
    ``bios``: SeaBIOS (no UEFI found on the host)."""

    kind: str = "bios"
    loader: str | None = None
    nvram_template: str | None = None


@dataclass(frozen=True)
class Placement:
    """Where the guest runs: the devices' NUMA node, its CPUs, and one pin per vCPU."""

    numa_node: int | None = None
    cpuset: str | None = None
    pins: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class DomainSpec:
    name: str
    memory_mib: int
    vcpus: int
    devices: tuple[Device, ...] = ()
    firmware: Firmware = field(default_factory=Firmware)
    placement: Placement = field(default_factory=Placement)
    hugepages: bool = False
    machine: str = "q35"
    arch: str = "x86_64"
    domain_type: str = "kvm"
    template = "libvirt/domain.xml.j2"

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise InvalidInput(
                f"invalid domain name {self.name!r}: letters, digits, '_', '.', '+', '-' (max 64)", value=self.name
            )
        if self.memory_mib < 64:
            raise InvalidInput(f"--memory {self.memory_mib} MiB is too small (at least 64)", value=self.memory_mib)
        if self.vcpus < 1:
            raise InvalidInput(f"--vcpus must be at least 1, got {self.vcpus}", value=self.vcpus)
