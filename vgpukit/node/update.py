"""The inventory kept current by what changed, rather than collected anew after every change.

On a large host most devices are VFs of a pool, each a function's own device; the rest (GPUs, their
MIG slices, vGPUs and shares, mdevs) are few and depend on NVML and files no uevent names. So a change
re-reads every device that is not a function's own (the GPUs' side, through :func:`.inventory.collect`
as always) and, of the functions' own devices, only those of the functions that changed: whose PCI record
differs from the last inventory's (a function no event named is caught too), that a change named, whose
VFIO group node came or went, their PFs, and every GPU and GPU VF. The others are kept. A full re-read, a
configuration file of vgpukit's (the CDI settings) or other options collect everything. The result
equals a fresh :func:`.inventory.collect` (tests/watch/test_incremental.py, over random change sequences).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..host import BDF_RE, Host
from ..pci import PciDevice, Scan
from .inventory import Device, Inventory, Options, collect, with_holders

if TYPE_CHECKING:
    from ..nvml import Nvml

OWN = frozenset({"vf", "pci"})  # CDI classes of a function's own device


def changed_functions(
    last: Inventory, pci: dict[str, PciDevice], named: Iterable[str], groups: Iterable[str] = ()
) -> set[str]:
    """The functions whose record differs from the last inventory's, those ``named``, those in the VFIO
    ``groups`` whose node came or went, and their PFs."""
    out = {b for b in last.pci.keys() | pci.keys() if last.pci.get(b) != pci.get(b)} | set(named)
    nodes = set(groups)
    if nodes:
        out |= {d.bdf for d in (*last.pci.values(), *pci.values()) if str(d.iommu_group) in nodes}
    for bdf in list(out):
        for d in (last.pci.get(bdf), pci.get(bdf)):
            if d is not None and d.physfn:
                out.add(d.physfn)
    return out


def _gpu_side(pci: dict[str, PciDevice]) -> set[str]:
    """GPUs and their VFs (vGPUs on VFs): read again at every change, as NVML may have changed them."""
    out = set()
    for bdf, d in pci.items():
        pf = pci.get(d.physfn) if d.physfn else None
        if d.kind == "gpu" or (pf is not None and pf.kind == "gpu"):
            out.add(bdf)
    return out


def _own(dev: Device) -> bool:
    """A function's own device (a VF of a pool): its id is its PCI function, its CDI class vf or pci."""
    return dev.id == dev.topo_bdf and (dev.cdi_name or "").partition("=")[0].rpartition("/")[2] in OWN


def _pci_warning(line: str) -> str | None:
    """The function a warning of the CDI collector's PCI part names (``0000:05:00.2 is bound to ...``)."""
    head = line.partition(" ")[0]
    return head if BDF_RE.fullmatch(head) else None


def update(
    last: Inventory,
    host: Host,
    nvml: Nvml | None,
    options: Options,
    scan: Scan,
    named: Iterable[str] = (),
    groups: Iterable[str] = (),
    holders: bool = True,
) -> Inventory | None:
    """``last`` with every device read again over ``scan`` but the own devices of functions that did not
    change (``named``: the functions a change named; ``groups``: VFIO groups whose node came or went);
    None when the options changed (collect everything then). ``holders``: as :func:`.inventory.collect`'s."""
    if last.options is None or last.options != options:
        return None
    pci = {d.bdf: d for d in scan.devices()}
    scope = (changed_functions(last, pci, named, groups) | _gpu_side(pci | last.pci)) & (pci.keys() | last.pci.keys())
    fresh = collect(host, nvml, options, scan, read=scope & pci.keys(), holders=False)
    resources: dict[str, list[Device]] = {}
    for name, devices in last.resources.items():  # the own devices of functions that did not change
        kept = [d for d in devices if _own(d) and d.id not in scope]
        if kept:
            resources[name] = kept
    for name, devices in fresh.resources.items():
        ids = {d.id for d in resources.get(name, [])}
        resources.setdefault(name, []).extend(d for d in devices if d.id not in ids)
    order = {b: i for i, b in enumerate(pci)}
    pci_lines = [w for w in last.warnings if (b := _pci_warning(w)) is not None and b not in scope and b in pci]
    pci_lines += [w for w in fresh.warnings if _pci_warning(w) is not None]
    pci_lines.sort(key=lambda w: order.get(_pci_warning(w) or "", -1))
    others = [w for w in fresh.warnings if _pci_warning(w) is None]
    inv = Inventory(
        {n: sorted(ds, key=lambda d: d.id) for n, ds in resources.items() if ds},
        pci,
        pci_lines + others,
        fresh.unread,
        options=options,
    )
    return with_holders(host, inv) if holders else inv
