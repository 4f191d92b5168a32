"""The name each device of the node has in its DRA pool: the one naming rule, read by the DRA plugin (which
publishes the names) and by whoever maps a claim record's device names back to the inventory (the exporter's
``claim`` labels, remediation).

=======  ===============================================  ============================================
kind     from (:mod:`.inventory`)                         DRA device name
=======  ===============================================  ============================================
gpu      whole NVIDIA GPUs (one per GPU)                  ``gpu-0000-03-00-0``
mig      existing MIG compute instances                   ``mig-<uuid>``
vf       VFs bound to VFIO (and VFs with a vGPU type);     ``vf-0000-05-00-2``
         VFs of other PFs on a host driver (bound to
         vfio-pci at prepare, back at unprepare)
mdev     existing mediated devices (vGPUs included)       ``mdev-<uuid>``
=======  ===============================================  ============================================
"""

from __future__ import annotations

import re

import msgspec

from .inventory import PREFIX, Device, Inventory

KINDS = ("gpu", "mig", "vf", "mdev")
_UNSAFE = re.compile(r"[^a-z0-9-]+")


class Named(msgspec.Struct, frozen=True):
    """One device of the pool: its DRA name and kind, the inventory's record, its device plugin resource."""

    name: str  # a DNS label, unique in the node's pool
    kind: str
    device: Device
    resource: str = ""  # vgpukit.io/mig-3g.20gb: the MIG profile, vGPU type ("" for a VF on a host driver)
    host_driver: str | None = None  # a VF on a host driver (mlx5_core): bound to vfio-pci at prepare


def device_name(kind: str, ident: str) -> str:
    """``("vf", "0000:05:00.2")`` -> ``vf-0000-05-00-2``; a MIG UUID loses its ``MIG-`` prefix."""
    ident = ident.lower()
    if ident.startswith("mig-"):
        ident = ident[4:]
    return (kind + "-" + _UNSAFE.sub("-", ident).strip("-"))[:63].rstrip("-")


def kind_of(resource: str, dev: Device) -> str | None:
    """The DRA kind of a device of a device plugin resource (None: not a DRA device: a QoS tenant's share)."""
    part = resource.rpartition("/")[2]
    cdi_class = (dev.cdi_name or "").partition("=")[0].rpartition("/")[2]
    if part == "gpu-share":
        return "gpu" if cdi_class == "gpu" else None  # a QoS tenant's share is not a whole GPU
    for prefix, kind in (("mig-", "mig"), ("vf-", "vf"), ("mdev-", "mdev"), ("vgpu-", cdi_class)):
        if part.startswith(prefix):
            return kind if kind in KINDS else None
    return None


def named(inv: Inventory) -> dict[str, Named]:
    """Every static device by DRA name (a whole GPU once, whatever its gpu-share replicas), and the VFs not
    on VFIO (no CDI entry yet) of PFs that are not GPUs."""
    out: dict[str, Named] = {}
    for resource, devices in sorted(inv.resources.items()):
        for dev in devices:
            kind = kind_of(resource, dev)
            if kind is None or dev.cdi_name is None:
                continue
            name = device_name(kind, dev.topo_bdf if kind == "gpu" else dev.id)
            out.setdefault(name, Named(name, kind, dev, resource))
    for bdf, fn in sorted(inv.pci.items()):
        pf = inv.pci.get(fn.physfn or "")
        name = device_name("vf", bdf)
        if not fn.is_vf or pf is None or pf.kind == "gpu" or name in out:
            continue
        dev = Device(bdf, bdf, fn.numa_node, f"{PREFIX}/vf={bdf}")
        out.setdefault(name, Named(name, "vf", dev, host_driver=fn.driver or "none"))
    return out
