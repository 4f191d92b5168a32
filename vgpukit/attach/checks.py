"""Checks before a device goes to a VM: IOMMU group viability, and who already holds it.

A VFIO user gets whole IOMMU groups. A group is viable when every *other* member is bound to
``vfio-pci`` (or a vendor VFIO variant, whose driver name contains ``vfio``), is unbound, or is a
PCI bridge / root port (``pcieport``).
"""

from __future__ import annotations

from ..errors import Busy, Conflict
from ..holders import OpenFiles
from ..host import Host
from ..pci import kind_of
from .devices import Target

HARMLESS_DRIVERS = ("pcieport", "shpchp")


def _member_ok(host: Host, bdf: str) -> tuple[bool, str | None]:
    driver = host.link_name(host.pci_device(bdf, "driver"))
    if driver is None or "vfio" in driver or driver in HARMLESS_DRIVERS:
        return True, driver
    cls = host.read_int(host.pci_device(bdf, "class"), 0) or 0
    vendor = host.read_int(host.pci_device(bdf, "vendor"), 0) or 0
    return kind_of(cls, vendor) == "bridge", driver


def check_iommu(host: Host, target: Target) -> None:
    """Conflict unless the target's IOMMU group can be handed to VFIO as a whole."""
    if target.iommu_group is None:
        what = "mdev" if target.kind == "mdev" else "device"
        raise Conflict(
            f"{what} {target.label} has no IOMMU group",
            device=target.label,
            hint="enable the IOMMU (intel_iommu=on / amd_iommu=on) and load vfio",
        )
    if target.kind == "mdev":
        return  # an mdev's group holds only itself
    members = host.listdir(host.sys("kernel", "iommu_groups", str(target.iommu_group), "devices"))
    for bdf in members:
        if bdf == target.bdf:
            continue
        ok, driver = _member_ok(host, bdf)
        if not ok:
            raise Conflict(
                f"IOMMU group {target.iommu_group} of {target.label} is not viable: {bdf} is bound to {driver}",
                device=target.label,
                hint=f"bind {bdf} to vfio-pci (vgpukit bind {bdf} vfio-pci) or unbind it",
            )


def check_not_held(host: Host, target: Target) -> None:
    """Busy when a process outside libvirt's view (a stray QEMU, a container) holds the device's group."""
    if target.iommu_group is None:
        return
    held = [h.describe() for h in OpenFiles(host).group(target.iommu_group)]
    if held:
        raise Busy(
            f"{target.label} is in use: /dev/vfio/{target.iommu_group} is held by {', '.join(held)}",
            device=target.label,
            hint="stop that process (or the VM / container using it) first",
        )
