"""Which devices the health layer watches, from PCI facts only (no NVML, no record): every GPU
(``gpuN``), the VFs of a GPU, every function bound to vfio-pci (a VM's device), and every SR-IOV PF
with VFs configured (a reset may take them away). A device it does not watch is never found
unusable, so a planner asks here first and loads nothing more for it."""

from __future__ import annotations

from ..naming import aliases, vf_names
from ..pci import PciDevice, Scan

VFIO = "vfio-pci"


def watched(scan: Scan, names: dict[str, str]) -> list[tuple[PciDevice, str, str]]:
    """(device, name, kind) of the GPUs, their VFs, the vfio-pci functions and the SR-IOV PFs with VFs
    configured, in bus order; ``names``: :func:`vgpukit.naming.aliases` of ``scan``."""
    out = []
    gpus = {bdf for bdf, name in names.items() if name.startswith("gpu")}
    vfs = vf_names(scan, names)  # a VF by the name listings show and commands take: ``gpu0 vf3``
    for dev in scan.devices():
        if dev.bdf in gpus:
            out.append((dev, names[dev.bdf], "gpu"))
        elif dev.physfn in gpus:
            out.append((dev, vfs.get(dev.bdf, dev.bdf), "vf"))
        elif dev.driver == VFIO:
            out.append((dev, vfs.get(dev.bdf, names.get(dev.bdf, dev.bdf)), "vf" if dev.physfn else "pci"))
        elif dev.sriov is not None and dev.sriov.num_vfs:
            out.append((dev, names.get(dev.bdf, dev.bdf), "pci"))
    return out


def is_watched(scan: Scan, bdf: str) -> bool:
    """Whether the health layer looks at ``bdf`` at all (what :func:`watched` lists)."""
    return any(dev.bdf == bdf for dev, _, _ in watched(scan, aliases(scan)))
