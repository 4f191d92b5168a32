"""Checks before a device goes to a VM: IOMMU group viability, and who already holds it.

A VFIO user gets whole IOMMU groups; what makes a group viable is defined once, in
:mod:`vgpukit.iommu`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .. import iommu
from ..errors import Busy, Conflict, InvalidInput
from ..holders import OpenFiles
from ..host import Host
from .devices import Target
from .model import PciAddress


def check_iommu(host: Host, target: Target) -> None:
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


def device_keys(xml: str) -> dict[str, ET.Element]:
    """``pci:<bdf>`` / ``mdev:<uuid>`` -> element, for every passed-through device in a domain's XML."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise InvalidInput(f"cannot parse domain XML: {exc}") from exc
    out: dict[str, ET.Element] = {}
    devices = root.find("devices")
    if devices is None:
        return out
    for el in devices:
        key = element_key(el)
        if key:
            out[key] = el
    return out


def element_key(el: ET.Element) -> str | None:
    """The identity of a ``<hostdev>`` / ``<interface type='hostdev'>`` element, or None."""
    if el.tag == "hostdev" and el.get("mode", "subsystem") == "subsystem":
        addr = el.find("source/address")
        if addr is None:
            return None
        if el.get("type") == "mdev":
            uuid = addr.get("uuid")
            return f"mdev:{uuid.lower()}" if uuid else None
        if el.get("type") == "pci":
            return _pci_key(addr)
    if el.tag == "interface" and el.get("type") == "hostdev":
        addr = el.find("source/address")
        if addr is not None and addr.get("type", "pci") == "pci":
            return _pci_key(addr)
    return None


def _pci_key(addr: ET.Element) -> str | None:
    try:
        return (
            "pci:"
            + PciAddress(
                addr.get("domain", "0x0000"), addr.get("bus", "0"), addr.get("slot", "0"), addr.get("function", "0")
            ).bdf
        )
    except ValueError:
        return None


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
