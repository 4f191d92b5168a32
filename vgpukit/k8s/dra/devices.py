"""The devices the DRA driver offers: the node's existing (static) devices, named by the one naming rule
(:mod:`vgpukit.node.dra_names`: kinds gpu, mig, vf, mdev) over the node's inventory.

The container edits come from the CDI collector (:mod:`vgpukit.cdi.spec`), as the device plugin's.
Devices made on demand (a MIG slice or vGPU created at prepare) are :mod:`.ondemand`'s and
:mod:`.ondemand_vgpu`'s, published by :mod:`.partitions`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from ...node.dra_names import named
from ...node.inventory import Device, Inventory

DRIVER = "gpu.vgpukit.io"
_PCI_NAME = re.compile(r"(?:gpu|vf)-([0-9a-f]{4,8})-([0-9a-f]{2})-([0-9a-f]{2})-([0-7])")


class DraDevice(msgspec.Struct, frozen=True):
    name: str  # a DNS label, unique in the node's pool
    kind: str
    device: Device  # the inventory's record: id, PCI function, NUMA node, CDI name
    resource: str = ""  # its device plugin resource (vgpukit.io/mig-3g.20gb): the MIG profile, vGPU type
    host_driver: str | None = None  # a VF on a host driver (mlx5_core): bound to vfio-pci at prepare


def dra_devices(inv: Inventory) -> dict[str, DraDevice]:
    """Every static device by DRA name (a whole GPU once, whatever its gpu-share replicas)."""
    return {n: DraDevice(n, d.kind, d.device, d.resource, d.host_driver) for n, d in named(inv).items()}


def pci_functions(names: Iterable[str]) -> frozenset[str]:
    """The PCI functions DRA device names name (``vf-0000-05-00-2`` -> ``0000:05:00.2``, ``gpu-...`` the
    same; a MIG slice's or an mdev's name none): the part of the PCI bus a claim's prepare reads."""
    return frozenset(f"{m[1]}:{m[2]}:{m[3]}.{m[4]}" for m in map(_PCI_NAME.fullmatch, names) if m)


def named_function(name: str) -> str | None:
    """The PCI function a DRA device name starts with (``gpu-0000-03-00-0``, a MIG slice made on demand on
    it, ``gpu-0000-03-00-0-mig-3g-20gb-0``, ``vf-0000-05-00-2``); None for a name of no function's."""
    m = _PCI_NAME.match(name)
    return f"{m[1]}:{m[2]}:{m[3]}.{m[4]}" if m else None
