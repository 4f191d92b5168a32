"""Gather the facts into a :class:`~.model.DeviceHealth` per device: NVML (conditions and events,
through the facade) and the PCI view (through the host door), compared with the health record.

Devices looked at: every GPU (``gpuN``), the VFs of a GPU, and every function bound to vfio-pci
(a VM's device), plus every device the record saw before (one that left sysfs is reported gone).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from msgspec.structs import replace

from ..host import AER_DEV_CORRECTABLE, AER_DEV_FATAL, AER_DEV_NONFATAL, Host
from ..naming import aliases
from ..nvml.errors import GPU_IS_LOST, NvmlError
from ..nvml.model import EventWatcher, Nvml, NvmlEvent
from ..pci import PciDevice, Scan
from . import resets
from .log import Record
from .model import DEFAULT_WINDOW, DeviceHealth, HealthEvent, event, summarize, summarize_slices
from .scope import VFIO, watched
from .xid import XidTable

AER_FILES = {"fatal": AER_DEV_FATAL, "nonfatal": AER_DEV_NONFATAL, "correctable": AER_DEV_CORRECTABLE}


@dataclass
class Look:
    """One look at the host: the devices' health, and the events found by this look."""

    devices: list[DeviceHealth]
    new_events: list[HealthEvent] = field(default_factory=list)


def aer_total(text: str | None) -> int | None:
    """The TOTAL_ERR_* line of an ``aer_dev_*`` file; None without one."""
    for line in (text or "").splitlines():
        name, _, value = line.strip().partition(" ")
        if name.startswith("TOTAL_ERR_") and value.strip().isdigit():
            return int(value.strip())
    return None


def _pci_facts(host: Host, dev: PciDevice, entries: frozenset[str], scan: Scan) -> dict[str, Any]:
    """``entries``: the device directory's names as the scan listed them (a file not there is not opened)."""
    aer = {}
    for kind, name in AER_FILES.items():
        total = aer_total(host.read_opt(host.pci_device(dev.bdf, name))) if name in entries else None
        if total is not None:
            aer[kind] = total
    facts: dict[str, Any] = {"group": dev.iommu_group, "aer": aer, "driver": dev.driver, "physfn": dev.physfn}
    if dev.sriov is not None:  # a VF is there when its function is (not only its PF's virtfn link)
        present = sum(1 for vf in dev.sriov.vfs if scan.exists(vf))
        facts["numvfs"], facts["vfs_present"] = dev.sriov.num_vfs, present
    return facts


def _pf_vfs(before: dict[str, Any], pci: dict[str, dict[str, Any]], scan: Scan) -> tuple[str, int, int] | None:
    """(PF, VFs configured, VFs present) of the PF of a VF that left sysfs, from this look (its PF is
    looked at again even when no longer watched: VFs disabled, ``sriov_numvfs`` 0); None: not a VF, or
    its PF is gone too."""
    pf = before.get("physfn")
    if not isinstance(pf, str) or pci.get(pf, {}).get("gone"):  # its PF left sysfs too: gone, not removed
        return None
    if pf in pci and "numvfs" in pci[pf]:
        return pf, int(pci[pf]["numvfs"] or 0), int(pci[pf].get("vfs_present") or 0)
    if not scan.exists(pf):
        return None
    sriov = scan.device(pf).sriov
    if sriov is None:
        return pf, 0, 0
    return pf, sriov.num_vfs, sum(1 for vf in sriov.vfs if scan.exists(vf))


def _renewed(dev: PciDevice, record: Record, scan: Scan) -> bool:
    """A VF whose PF's VF count changed since the record (the kernel changes it only through 0): a new
    function at an old address, to which nothing recorded of the old one applies (IOMMU group, AER)."""
    if dev.physfn is None or not scan.exists(dev.physfn):
        return False
    was, sriov = record.pci.get(dev.physfn, {}).get("numvfs"), scan.device(dev.physfn).sriov
    return was is not None and sriov is not None and int(was) != sriov.num_vfs


def _repair(pf: str, facts: dict[str, Any], record: Record) -> str:
    """The command that re-creates the VFs of ``pf`` as they were (vfio-pci when every VF the record
    saw was there), or the host config's apply."""
    drivers = {str(v.get("driver")) for v in record.pci.values() if v.get("physfn") == pf}
    driver = " --driver vfio-pci" if drivers == {VFIO} else ""
    return f"vgpukit sriov enable {pf} --vfs {facts['numvfs']}{driver} (or vgpukit apply of the host config)"


def _nvml_part(
    nvml: Nvml | None, record: Record, watcher: EventWatcher | None
) -> tuple[dict[str, list[tuple[str, int]]], list[NvmlEvent], dict[int, str]]:
    """Findings by BDF, the new NVML events, and the BDF of each NVML index."""
    findings: dict[str, list[tuple[str, int]]] = {}
    if nvml is None:
        return findings, [], {}
    try:
        gpus = nvml.gpus()
    except NvmlError:
        return findings, [], {}
    by_index = {g.index: g.bdf for g in gpus}
    for g in gpus:
        try:
            cond = nvml.condition(g.index)
        except NvmlError as exc:
            findings.setdefault(g.bdf, []).append(("lost" if exc.code == GPU_IS_LOST else "error", exc.code))
            continue
        if cond.lost:
            findings.setdefault(g.bdf, []).append(("lost", 0))
        elif cond.ecc_uncorrected:
            findings.setdefault(g.bdf, []).append(("ecc-uncorrected", cond.ecc_uncorrected))
    own = watcher is None
    w = nvml.watch_events(dict(record.cursor)) if own else watcher
    assert w is not None
    try:
        evs = w.wait(0)
    finally:
        if own:
            w.close()
    for e in evs:
        if e.seq:
            record.cursor[e.gpu] = max(record.cursor.get(e.gpu, 0), e.seq)
    return findings, evs, by_index


def look(
    host: Host,
    nvml: Nvml | None,
    table: XidTable,
    record: Record,
    *,
    watcher: EventWatcher | None = None,
    now: float | None = None,
    window: float = DEFAULT_WINDOW,
    scan: Scan | None = None,
) -> Look:
    """Every device's health now; ``record`` is updated (events added, PCI facts replaced)."""
    now = time.time() if now is None else now
    scan = scan or Scan(host)  # a caller's scan: what it already read is not read again
    names = aliases(scan)
    findings, nvml_events, by_index = _nvml_part(nvml, record, watcher)
    name_of = {bdf: name for bdf, name in names.items()}
    new: list[HealthEvent] = []
    for e in nvml_events:
        bdf = by_index.get(e.gpu, f"nvml{e.gpu}")
        new.append(event(e.time or now, name_of.get(bdf, bdf), bdf, e.kind, e.data, table, e.gi))
    devices: dict[str, tuple[str, str]] = {}
    pci: dict[str, dict[str, Any]] = {}
    repairs: dict[str, str] = {}
    for dev, name, kind in watched(scan, names):
        devices[dev.bdf] = (name, kind)
        facts = _pci_facts(host, dev, scan.entries(dev.bdf), scan)
        before = {} if _renewed(dev, record, scan) else record.pci.get(dev.bdf, {})
        pci[dev.bdf] = {**facts, "name": name, "kind": kind}
        if "numvfs" in facts and facts["vfs_present"] < facts["numvfs"]:
            findings.setdefault(dev.bdf, []).append(("vfs-missing", facts["numvfs"] - facts["vfs_present"]))
            repairs[dev.bdf] = _repair(dev.bdf, facts, record)
        for aer_kind, total in facts["aer"].items():
            if total > int(before.get("aer", {}).get(aer_kind, 0)):
                new.append(event(now, name, dev.bdf, f"aer-{aer_kind}", total, table))
        old_group = before.get("group")
        if (
            not before.get("gone")
            and old_group is not None
            and facts["group"] != old_group
            and VFIO in (facts["driver"], before.get("driver"))
        ):
            new.append(event(now, name, dev.bdf, "iommu-group-changed", facts["group"] or -1, table))
    left: dict[tuple[str, str], int] = {}  # (PF, vfs-removed | vfs-missing) -> its VFs that left in this look
    for bdf, before in record.pci.items():
        if bdf in pci or scan.exists(bdf):
            continue  # still there (no longer watched)
        vfs = _pf_vfs(before, pci, scan)
        if vfs is not None and vfs[1] <= vfs[2]:  # its PF's VF count changed on purpose (disabled, fewer)
            left[vfs[0], "vfs-removed"] = left.get((vfs[0], "vfs-removed"), 0) + (not before.get("gone"))
            continue  # forgotten: the VF is no more, nothing is missing
        name, kind = str(before.get("name", bdf)), str(before.get("kind", "pci"))
        devices[bdf] = (name, kind)
        pci[bdf] = {**before, "gone": True}
        if vfs is not None:  # gone with its PF's other VFs: re-created by the PF's repair, not a reboot
            findings.setdefault(bdf, []).append(("vf-missing", 0))
            repairs[bdf] = repairs.get(vfs[0], "") + _still_held(host, before.get("group"))
            left[vfs[0], "vfs-missing"] = left.get((vfs[0], "vfs-missing"), 0) + (not before.get("gone"))
            continue
        findings.setdefault(bdf, []).append(("pci-gone", 0))
        if not before.get("gone"):
            new.append(event(now, name, bdf, "pci-gone", 0, table))
    for (pf, what), count in left.items():  # one event per PF for the VFs that went (docs/health.md)
        if count:
            new.append(event(now, names.get(pf, pf), pf, what, count, table))
    for bdf in devices:  # a device whose lasting condition went away (reset, back on the bus) starts afresh
        now_bad = sorted({k for k, _ in findings.get(bdf, [])})
        before_bad = record.pci.get(bdf, {}).get("bad", [])
        cleared = record.pci.get(bdf, {}).get("cleared", 0)
        pci.setdefault(bdf, {}).update(bad=now_bad, cleared=now if before_bad and not now_bad else cleared)
    record.pci = pci
    record.add(
        [
            {k: getattr(e, k) for k in ("time", "device", "bdf", "kind", "data", "gi") if k != "gi" or e.gi >= 0}
            for e in new
        ]
    )
    past = [
        event(float(r["time"]), r["device"], r["bdf"], r["kind"], r["data"], table, r.get("gi", -1))
        for r in record.events
    ]
    reset_at = resets.load(host)  # a reset by vgpukit is a recovery point too (vgpukit reset / remediate)
    by_bdf: dict[str, list[HealthEvent]] = {}  # each device's events, in the record's order
    for was in past:
        by_bdf.setdefault(was.bdf, []).append(was)
    out = []
    for bdf, (name, kind) in devices.items():
        evs = by_bdf.get(bdf, [])
        since = max(float(pci[bdf].get("cleared", 0)), reset_at.get(bdf, 0.0))
        counted = [e for e in evs if e.time >= since]  # a new event of this very look counts
        health = summarize(name, bdf, kind, findings.get(bdf, []), evs, table, now, window, counted)
        if any(e.slice_scoped for e in counted):
            health = summarize_slices(health, counted, now, window, _mig_devices(nvml, by_index, bdf))
        if repairs.get(bdf) and health.action == "recreate-vfs":
            health = replace(health, repair=repairs[bdf])
        out.append(health)
    return Look(out, new)


def _still_held(host: Host, group: object) -> str:
    """What the repair of a VF gone with its PF's others adds when a VM still holds the VF's old VFIO
    group open (it lost the device; the re-created VF is a new one, in a new group)."""
    if not isinstance(group, int) or isinstance(group, bool):
        return ""
    from ..holders import group_holders

    users = group_holders(host, {group}).get(group, [])
    if not users:
        return ""
    who = ", ".join(u.describe() for u in users)
    return f"; {who} still holds its old VFIO group {group}: that VM lost the device, stop or detach it"


def _mig_devices(nvml: Nvml | None, by_index: dict[int, str], bdf: str) -> dict[int, tuple[str, ...]]:
    """GPU instance -> its MIG device UUIDs, of the GPU at ``bdf`` (read only for a GPU whose slices
    have events of their own; empty when NVML cannot say)."""
    index = next((i for i, b in by_index.items() if b == bdf), None)
    if nvml is None or index is None:
        return {}
    try:
        return {gi.id: tuple(ci.uuid for ci in gi.compute_instances) for gi in nvml.gpu_instances(index)}
    except NvmlError:
        return {}
