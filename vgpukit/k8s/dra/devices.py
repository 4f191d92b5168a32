"""The devices the DRA driver offers: the node's existing (static) devices, read from the inventory.

=======  ===============================================  ============================================
kind     from (:mod:`vgpukit.k8s.inventory`)              DRA device name
=======  ===============================================  ============================================
gpu      whole NVIDIA GPUs (one per GPU)                  ``gpu-0000-03-00-0``
mig      existing MIG compute instances                   ``mig-<uuid>``
vf       VFs bound to VFIO (and VFs with a vGPU type);     ``vf-0000-05-00-2``
         VFs of other PFs on a host driver (bound to
         vfio-pci at prepare, back at unprepare)
mdev     existing mediated devices (vGPUs included)       ``mdev-<uuid>``
=======  ===============================================  ============================================

The container edits come from the CDI collector (:mod:`vgpukit.cdi.spec`), as the device plugin's.
Devices made on demand (a MIG slice or vGPU created at prepare) are :mod:`.ondemand`'s and
:mod:`.ondemand_vgpu`'s, published by :mod:`.partitions`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from ..inventory import PREFIX, Device, Inventory

DRIVER = "gpu.vgpukit.io"
KINDS = ("gpu", "mig", "vf", "mdev")
_UNSAFE = re.compile(r"[^a-z0-9-]+")
_PCI_NAME = re.compile(r"(?:gpu|vf)-([0-9a-f]{4,8})-([0-9a-f]{2})-([0-9a-f]{2})-([0-7])")


class DraDevice(msgspec.Struct, frozen=True):
    name: str  # a DNS label, unique in the node's pool
    kind: str
    device: Device  # the inventory's record: id, PCI function, NUMA node, CDI name
    resource: str = ""  # its device plugin resource (vgpukit.io/mig-3g.20gb): the MIG profile, vGPU type
    host_driver: str | None = None  # a VF on a host driver (mlx5_core): bound to vfio-pci at prepare


def device_name(kind: str, ident: str) -> str:
    """``("vf", "0000:05:00.2")`` -> ``vf-0000-05-00-2``; a MIG UUID loses its ``MIG-`` prefix."""
    ident = ident.lower()
    if ident.startswith("mig-"):
        ident = ident[4:]
    return (kind + "-" + _UNSAFE.sub("-", ident).strip("-"))[:63].rstrip("-")


def _kind(resource: str, dev: Device) -> str | None:
    part = resource.rpartition("/")[2]
    cdi_class = (dev.cdi_name or "").partition("=")[0].rpartition("/")[2]
    if part == "gpu-share":
        return "gpu" if cdi_class == "gpu" else None  # a QoS tenant's share is not a whole GPU
    for prefix, kind in (("mig-", "mig"), ("vf-", "vf"), ("mdev-", "mdev"), ("vgpu-", cdi_class)):
        if part.startswith(prefix):
            return kind if kind in KINDS else None
    return None


def dra_devices(inv: Inventory) -> dict[str, DraDevice]:
    """Every static device by DRA name (a whole GPU once, whatever its gpu-share replicas)."""
    out: dict[str, DraDevice] = {}
    for resource, devices in sorted(inv.resources.items()):
        for dev in devices:
            kind = _kind(resource, dev)
            if kind is None or dev.cdi_name is None:
                continue
            name = device_name(kind, dev.topo_bdf if kind == "gpu" else dev.id)
            out.setdefault(name, DraDevice(name, kind, dev, resource))
    for bdf, fn in sorted(inv.pci.items()):  # VFs not on VFIO (no CDI entry yet), of PFs that are not GPUs
        pf = inv.pci.get(fn.physfn or "")
        name = device_name("vf", bdf)
        if not fn.is_vf or pf is None or pf.kind == "gpu" or name in out:
            continue
        dev = Device(bdf, bdf, fn.numa_node, f"{PREFIX}/vf={bdf}")
        out.setdefault(name, DraDevice(name, "vf", dev, host_driver=fn.driver or "none"))
    return out


def pci_functions(names: Iterable[str]) -> frozenset[str]:
    """The PCI functions DRA device names name (``vf-0000-05-00-2`` -> ``0000:05:00.2``, ``gpu-...`` the
    same; a MIG slice's or an mdev's name none): the part of the PCI bus a claim's prepare reads."""
    return frozenset(f"{m[1]}:{m[2]}:{m[3]}.{m[4]}" for m in map(_PCI_NAME.fullmatch, names) if m)


def named_function(name: str) -> str | None:
    """The PCI function a DRA device name starts with (``gpu-0000-03-00-0``, a MIG slice made on demand on
    it, ``gpu-0000-03-00-0-mig-3g-20gb-0``, ``vf-0000-05-00-2``); None for a name of no function's."""
    m = _PCI_NAME.match(name)
    return f"{m[1]}:{m[2]}:{m[3]}.{m[4]}" if m else None
