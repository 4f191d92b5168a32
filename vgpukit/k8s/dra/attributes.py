"""The attributes of a device that a workload (a VM's virt-launcher) reads, and the standard ones.

``resource.kubernetes.io/pciBusID`` (a PCI function's address, ``DDDD:BB:DD.F``),
``resource.kubernetes.io/pcieRoot`` (its root complex, ``pci<domain>:<bus>``) and
``resource.kubernetes.io/numaNode`` are the standard attributes (KEP-4381, docs/kubernetes.md);
``mdevUUID`` is the one KubeVirt reads for a mediated device (no standard one yet). The same names go in
the ResourceSlice (:mod:`.slices`) and in a prepared claim's device metadata (:mod:`.metadata`).
"""

from __future__ import annotations

from typing import Any

STANDARD = "resource.kubernetes.io"
PCI_BUS_ID = f"{STANDARD}/pciBusID"
PCIE_ROOT = f"{STANDARD}/pcieRoot"
NUMA_NODE = f"{STANDARD}/numaNode"
MDEV_UUID = "mdevUUID"  # what KubeVirt's virt-launcher reads (docs/kubevirt.md), in the driver's domain


def standard(kind: str, ident: str, bdf: str, host_bridge: str | None, numa: int | None) -> dict[str, Any]:
    """The standard attributes and ``mdevUUID`` of a device of ``kind`` (gpu, vf, mig, mdev) whose own id is
    ``ident`` (a VF's BDF, an mdev's UUID) and whose PCI function is ``bdf`` (a MIG slice's, an mdev's: its
    parent's)."""
    out: dict[str, Any] = {}
    if kind in ("gpu", "vf"):
        out[PCI_BUS_ID] = {"string": bdf}
    if kind == "mdev":
        out[MDEV_UUID] = {"string": ident}
    if host_bridge:
        out[PCIE_ROOT] = {"string": host_bridge}
    if numa is not None and numa >= 0:
        out[NUMA_NODE] = {"int": numa}
    return out
