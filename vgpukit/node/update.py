"""The inventory kept current by what changed, rather than collected anew after every change.

A change that reaches only *plain* PCI functions (VFs and PFs that are neither GPUs, nor VFs of a GPU,
nor mdev parents: a VF created, removed, bound or unbound) re-reads only those functions' own devices
(their ``vf`` pool entries, through the same rules: :func:`.inventory.vfs`, the CDI collector scoped to
them) and keeps every other device of the last inventory; anything else (a GPU, MIG, an mdev, the QoS
config, vgpukit's files, NVML) makes the caller collect everything (:func:`.inventory.collect`). Which
functions changed is found by comparing the PCI snapshot with the last inventory's (so a function no
event named is caught too), plus those the change named and their PFs. The result equals a fresh
:func:`.inventory.collect` (tests/watch/test_incremental.py, over random change sequences).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..host import Host
from ..host_layout import BDF_RE
from ..pci import PciDevice, Scan
from .inventory import Device, Inventory, Options, cdi_entries, vfs, with_holders

if TYPE_CHECKING:
    from ..nvml import Nvml

OWN = frozenset({"vf", "pci"})  # CDI classes of a function's own device


def changed_functions(last: Inventory, pci: dict[str, PciDevice], named: Iterable[str]) -> set[str]:
    """The functions whose record differs from the last inventory's, those ``named``, and their PFs."""
    out = {b for b in last.pci.keys() | pci.keys() if last.pci.get(b) != pci.get(b)} | set(named)
    for bdf in list(out):
        for d in (last.pci.get(bdf), pci.get(bdf)):
            if d is not None and d.physfn:
                out.add(d.physfn)
    return out


def _own(dev_id: str, topo: str, cdi_name: str | None) -> bool:
    """A function's own device (a VF of a pool): its id is its PCI function, its CDI class vf or pci."""
    return dev_id == topo and (cdi_name or "").partition("=")[0].rpartition("/")[2] in OWN


def _plain(fns: set[str], last: Inventory, pci: dict[str, PciDevice]) -> bool:
    """Whether every function in ``fns`` is plain (not a GPU, a GPU's VF or an mdev parent, before or now)
    and no device of the last inventory but a function's own stands on one of them."""
    for bdf in fns:
        for d in (last.pci.get(bdf), pci.get(bdf)):
            if d is None:
                continue
            pf = (pci.get(d.physfn) or last.pci.get(d.physfn)) if d.physfn else None
            if d.kind == "gpu" or d.mdev_types or (pf is not None and pf.kind == "gpu"):
                return False
    return not any(
        dev.topo_bdf in fns and not _own(dev.id, dev.topo_bdf, dev.cdi_name)
        for devices in last.resources.values()
        for dev in devices
    )


def _pci_warning(line: str) -> str | None:
    """The function a warning of the CDI collector's PCI part names (``0000:05:00.2 is bound to ...``)."""
    head = line.partition(" ")[0]
    return head if BDF_RE.fullmatch(head) else None


def update(
    last: Inventory, host: Host, nvml: Nvml | None, options: Options, scan: Scan, named: Iterable[str] = ()
) -> Inventory | None:
    """``last`` with the devices of the functions that changed (``named``: those a change named) read again
    over ``scan``; None when the change reaches beyond plain functions or the options changed (collect
    everything then)."""
    if last.options is None or last.options != options:
        return None
    pci = {d.bdf: d for d in scan.devices()}
    fns = changed_functions(last, pci, named)
    if not _plain(fns, last, pci):
        return None
    here = {b for b in fns if b in pci}
    part = Inventory(options=options)
    pfs = {pf for b in here if (pf := pci[b].physfn) is not None and pf in pci}
    part.pci = {b: pci[b] for b in sorted(here | pfs)}
    part.listed = {b: scan.entries(b) for b in part.pci}
    part.vfio_shown = host.display(host.vfio_dir()) + "/"
    found: list[str] = []
    vfs(host, part, set(), cdi_entries(host, nvml, found, scan, here, classes=("vf", "pci")))
    resources: dict[str, list[Device]] = {}
    for name, devices in last.resources.items():
        kept = [d for d in devices if not (d.id in fns and _own(d.id, d.topo_bdf, d.cdi_name))]
        resources[name] = kept
    for name, devices in part.resources.items():
        resources.setdefault(name, []).extend(devices)
    order = {b: i for i, b in enumerate(pci)}
    pci_lines = [w for w in last.warnings if _pci_warning(w) not in fns and _pci_warning(w) is not None]
    pci_lines += [w for w in found if _pci_warning(w) in fns]
    pci_lines.sort(key=lambda w: order.get(_pci_warning(w) or "", -1))
    others = [w for w in last.warnings if _pci_warning(w) is None]
    inv = Inventory(
        {n: sorted(ds, key=lambda d: d.id) for n, ds in resources.items() if ds},
        pci,
        pci_lines + others,
        list(last.unread),
        options=options,
    )
    return with_holders(host, inv)
