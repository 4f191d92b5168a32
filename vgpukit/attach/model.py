"""What ``render domain`` decides about a whole VM (disks, NICs, console, firmware, NUMA placement).

Plain data (no I/O) for the ``libvirt/domain.xml.j2`` template. The device elements are the XML
model's objects (:mod:`vgpukit.libvirt.domain`), which parse what libvirt stores and render through
their own templates.
"""

from __future__ import annotations

import re

import msgspec

from ..errors import InvalidInput
from ..libvirt.domain import Device

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}\Z", re.ASCII)


class Firmware(msgspec.Struct, frozen=True):
    """``efi``: libvirt picks OVMF from the firmware descriptors; ``pflash``: explicit OVMF files;
    ``bios``: SeaBIOS (no UEFI found on the host)."""

    kind: str = "bios"
    loader: str | None = None
    nvram_template: str | None = None


class GuestPlacement(msgspec.Struct, frozen=True):
    """Where the guest runs: the devices' NUMA node, its CPUs, and one pin per vCPU."""

    numa_node: int | None = None
    cpuset: str | None = None
    pins: tuple[tuple[int, int], ...] = ()


class Disk(msgspec.Struct, frozen=True):
    """A disk or CD-ROM: ``path`` as the host names it, ``format`` as libvirt names it (``qcow2``,
    ``raw``...), ``source`` ``file`` or ``block``, ``target`` the guest's name (``vda``, ``sda``) on ``bus``."""

    path: str
    format: str
    target: str
    device: str = "disk"  # or "cdrom"
    source: str = "file"  # or "block"
    bus: str = "virtio"  # "sata" for a CD-ROM (q35 has no IDE)

    def __post_init__(self) -> None:
        if self.device not in ("disk", "cdrom") or self.source not in ("file", "block") or self.path[:1] != "/":
            raise InvalidInput(f"invalid disk {self.path!r} ({self.device}, {self.source})", value=self.path)


class Nic(msgspec.Struct, frozen=True):
    """A virtio NIC on a libvirt network (``kind`` ``network``) or a host bridge (``bridge``)."""

    kind: str
    source: str

    def __post_init__(self) -> None:
        if self.kind not in ("network", "bridge"):  # the template writes it as an attribute name
            raise InvalidInput(f"invalid NIC kind {self.kind!r}: network or bridge", value=self.kind)


class DomainSpec(msgspec.Struct, frozen=True):
    name: str
    memory_mib: int
    vcpus: int
    devices: tuple[Device, ...] = ()
    firmware: Firmware = msgspec.field(default_factory=Firmware)
    placement: GuestPlacement = msgspec.field(default_factory=GuestPlacement)
    hugepages: bool = False
    disks: tuple[Disk, ...] = ()
    nics: tuple[Nic, ...] = ()
    graphics: str | None = None  # None (serial console only), "vnc" or "spice"
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
        if self.graphics not in (None, "vnc", "spice") or self.domain_type not in ("kvm", "qemu"):
            raise InvalidInput(f"invalid graphics {self.graphics!r} or domain type {self.domain_type!r}")

    @property
    def boot(self) -> tuple[str, ...]:
        """Boot order: the CD-ROM first when there is one (an installer), then the disk."""
        return ("cdrom", "hd") if any(d.device == "cdrom" for d in self.disks) else ("hd",)
