"""What ``render domain`` decides about a whole VM (firmware, NUMA placement, hugepages).

Plain data (no I/O) for the ``libvirt/domain.xml.j2`` template. The device elements are the XML
model's objects (:mod:`vgpukit.libvirt.domain`), which parse what libvirt stores and render through
their own templates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import InvalidInput
from ..libvirt.domain import Device

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}\Z", re.ASCII)


@dataclass(frozen=True)
class Firmware:
    """``efi``: libvirt picks OVMF from the firmware descriptors; ``pflash``: explicit OVMF files;
    ``bios``: SeaBIOS (no UEFI found on the host)."""

    kind: str = "bios"
    loader: str | None = None
    nvram_template: str | None = None


@dataclass(frozen=True)
class GuestPlacement:
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
    placement: GuestPlacement = field(default_factory=GuestPlacement)
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
