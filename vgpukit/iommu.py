"""IOMMU groups and when one can go to a VM: the one definition of a *viable* group.

VFIO hands out whole groups. A group is viable for VFIO when every member other than the devices
being handed over is

* bound to ``vfio-pci`` or a vendor VFIO variant (a driver whose name contains ``vfio``, e.g.
  ``mlx5_vfio_pci``, ``nvgrace_gpu_vfio_pci``),
* bound to no driver,
* or a PCI bridge / root port (``pcieport``, ``shpchp``, or a bridge by class), which the kernel
  lets share a group with a VFIO user.

Any other member (a device still on its host driver) keeps the group from being usable.
"""

from __future__ import annotations

import msgspec

from .host import DRIVER, Host
from .pci_kind import kind_of

HARMLESS_DRIVERS = ("pcieport", "shpchp")


class Blocker(msgspec.Struct, frozen=True):
    """A group member that keeps the group from being viable."""

    bdf: str
    driver: str


def members(host: Host, group: int) -> list[str]:
    """The PCI functions (and mdevs) of IOMMU group ``group``."""
    return host.listdir(host.iommu_group(group, "devices"))


def member_ok(driver: str | None, class_code: int) -> bool:
    """May a device on ``driver`` (None: unbound) with this PCI class share a group given to VFIO?"""
    if driver is None or "vfio" in driver or driver in HARMLESS_DRIVERS:
        return True
    return kind_of(class_code, 0) == "bridge"


def blockers(host: Host, group: int, handed_over: frozenset[str] | set[str] = frozenset()) -> list[Blocker]:
    """Members of ``group`` that are not ``handed_over`` and would keep it from being viable."""
    out = []
    for bdf in members(host, group):
        if bdf in handed_over:
            continue
        driver = host.link_name(host.pci_device(bdf, DRIVER))
        if driver is None or "vfio" in driver or driver in HARMLESS_DRIVERS:
            continue
        if not member_ok(driver, host.read_int(host.pci_device(bdf, "class"), 0) or 0):
            out.append(Blocker(bdf, driver))
    return out
