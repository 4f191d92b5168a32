"""Build the records behind ``render hostdev`` and ``render domain`` from what the host reports."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Busy, Conflict, DeviceUnusable
from ..host import Host
from ..libvirt.domain import Device
from . import media
from .devices import AttachTarget, resolve
from .hostfacts import firmware_for, hugepage_warnings, placement_for
from .model import DomainSpec
from .planner import check_iommu, check_not_console, check_not_quarantined

if TYPE_CHECKING:
    from ..nvml import Nvml


def hostdev(
    host: Host,
    name: str,
    *,
    nvml: Nvml | None = None,
    mac: str | None = None,
    vlan: int | None = None,
    managed: bool | None = None,
) -> tuple[AttachTarget, Device]:
    target = resolve(host, name, nvml)
    return target, target.element(mac=mac, vlan=vlan, managed=managed)


def domain(
    host: Host,
    *,
    nvml: Nvml | None = None,
    name: str,
    memory_mib: int,
    vcpus: int,
    devices: list[str],
    firmware: str = "auto",
    hugepages: bool = False,
    pin: bool = True,
    disks: list[str] | None = None,
    cdrom: str | None = None,
    networks: list[str] | None = None,
    bridges: list[str] | None = None,
    no_network: bool = False,
    graphics: str | None = None,
    virt_type: str = "kvm",
) -> tuple[DomainSpec, list[str]]:
    """The domain record and the warnings worth showing (nothing to boot, a network not defined,
    NUMA split, no UEFI, short on hugepages)."""
    DomainSpec(name=name, memory_mib=memory_mib, vcpus=vcpus)  # validate before reading the host
    nics, net_warnings = media.nics(host, networks or [], bridges or [], no_network)
    disk_records, warnings = media.disks(host, disks or [], cdrom)
    warnings += net_warnings
    targets = [resolve(host, d, nvml) for d in devices]
    placement, placed = placement_for(host, [t.numa_node for t in targets], vcpus, pin=pin)
    warnings += placed
    for t in targets:
        try:
            check_not_console(t)
            check_iommu(host, t)
            check_not_quarantined(host, [t])
        except (
            Busy,
            Conflict,
            DeviceUnusable,
        ) as exc:  # rendering is allowed; starting that VM would fail or take the console
            warnings.append(str(exc))
    fw = firmware_for(host, firmware)
    if fw.kind == "bios" and firmware == "auto":
        warnings.append("no UEFI firmware found on this host (install ovmf); the VM boots with SeaBIOS")
    if hugepages:
        warnings.extend(hugepage_warnings(host, placement.numa_node, memory_mib))
    spec = DomainSpec(
        name=name,
        memory_mib=memory_mib,
        vcpus=vcpus,
        devices=tuple(t.element() for t in targets),
        firmware=fw,
        placement=placement,
        hugepages=hugepages,
        disks=disk_records,
        nics=nics,
        graphics=graphics,
        domain_type=virt_type,
    )
    return spec, warnings
