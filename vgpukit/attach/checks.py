"""Checks before a device goes to a VM: IOMMU group viability, and who already holds it.

A VFIO user gets whole IOMMU groups; what makes a group viable is defined once, in
:mod:`vgpukit.iommu`.
"""

from __future__ import annotations

from .. import iommu
from ..errors import Busy, Conflict
from ..holders import OpenFiles
from ..host import Host
from .devices import AttachTarget


def check_iommu(host: Host, target: AttachTarget) -> None:
    """Conflict unless the target's IOMMU group can be handed to VFIO as a whole (see :mod:`vgpukit.iommu`)."""
    if target.iommu_group is None:
        what = "mdev" if target.kind == "mdev" else "device"
        raise Conflict(
            f"{what} {target.label} has no IOMMU group",
            device=target.label,
            hint="enable the IOMMU (intel_iommu=on / amd_iommu=on) and load vfio",
        )
    if target.kind == "mdev":
        return  # an mdev's group holds only itself
    for b in iommu.blockers(host, target.iommu_group, {target.bdf} if target.bdf else set()):
        raise Conflict(
            f"IOMMU group {target.iommu_group} of {target.label} is not viable: {b.bdf} is bound to {b.driver}",
            device=target.label,
            hint=f"bind {b.bdf} to vfio-pci (vgpukit bind {b.bdf} --driver vfio-pci) or unbind it",
        )


def check_not_console(target: AttachTarget) -> None:
    """Busy for the console display device (boot_vga) still on a host driver: a managed hostdev makes
    libvirt take it from its driver when the VM starts. Moving it first (``bind --force``) is the
    deliberate act that lets it go to a VM."""
    if target.console and not (target.driver and "vfio" in target.driver):
        raise Busy(
            f"cannot give {target.label} to a VM: it is the console display device (boot_vga)",
            device=target.label,
            hint=f"if the console is not needed: vgpukit bind {target.label} --driver vfio-pci --force",
        )


def check_not_held(host: Host, target: AttachTarget) -> None:
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
