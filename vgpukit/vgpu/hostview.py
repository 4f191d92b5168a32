"""What the host reports about NVIDIA vGPU, over both interfaces (reads only).

* legacy mdev: the GPU (or each of its VFs, Ampere + ``sriov-manage``) is an mdev parent with
  ``nvidia-NNN`` types; capacity is each type's ``available_instances``.
* vendor-specific VFIO: each VF has ``nvidia/creatable_vgpu_types`` (what the card can take now)
  and ``nvidia/current_vgpu_type`` (0 = no vGPU).
"""

from __future__ import annotations

import re

import msgspec

from ..holders import group_holders
from ..host import MDEV_TYPES, Host
from ..mdev import mdevctl
from ..mdev import sysfs as mdev_sysfs
from ..mdev.model import MdevType
from ..naming import aliases
from ..pci import PciDevice, Scan
from ..pci_kind import vgpu_type
from .catalog import for_device, framebuffer_mb, parse_description, short_name
from .model import MDEV, VFIO, GpuView, Vgpu, VgpuType

LINE_RE = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$")


def parse_creatable(text: str | None) -> list[tuple[int, str]]:
    """``creatable_vgpu_types`` -> [(id, name)]; the header line (``ID : vGPU Name``) is skipped."""
    out = []
    for line in (text or "").splitlines():
        m = LINE_RE.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2)))
    return out


def is_nvidia_gpu(d: PciDevice) -> bool:
    return d.vendor == "10de" and d.kind == "gpu" and not d.is_vf


def gpus(host: Host, scan: Scan) -> list[GpuView]:
    """Every physical NVIDIA GPU, with the vGPU interface its host driver offers."""
    names = aliases(scan)
    mdev_parents = set(mdev_sysfs.parent_names(host))
    out = []
    for d in scan.physical():
        if not is_nvidia_gpu(d):
            continue
        vfs = d.sriov.vfs if d.sriov else ()
        parents = tuple(p for p in (d.bdf, *vfs) if p in mdev_parents and _nvidia_types(host, p))
        vfio_vfs = tuple(v for v in vfs if host.exists(host.pci_device(v, "nvidia", "current_vgpu_type")))
        interface = MDEV if parents else VFIO if vfio_vfs else None
        num = d.sriov.num_vfs if d.sriov else 0
        missing = max(0, num - sum(1 for v in vfs if scan.exists(v)))
        out.append(GpuView(d.bdf, names.get(d.bdf), d.name, interface, parents, vfio_vfs, missing, num))
    return out


def _nvidia_types(host: Host, parent: str) -> list[str]:
    return [t for t in host.listdir(host.mdev_parent(parent, MDEV_TYPES)) if t.startswith("nvidia-")]


def current_type(host: Host, vf: str) -> int:
    return vgpu_type(host, vf)


def creatable(host: Host, vf: str) -> list[tuple[int, str]]:
    return parse_creatable(host.read_opt(host.pci_device(vf, "nvidia", "creatable_vgpu_types")))


def types(host: Host, gpu: GpuView) -> list[VgpuType]:
    if gpu.interface == MDEV:
        return _mdev_types(host, gpu)
    if gpu.interface == VFIO:
        return _vfio_types(host, gpu)
    return []


def _mdev_types(host: Host, gpu: GpuView) -> list[VgpuType]:
    merged: dict[str, list[MdevType]] = {}
    for p in gpu.parents:
        for t in _nvidia_types(host, p):
            merged.setdefault(t, []).append(mdev_sysfs.read_type(host, p, t))
    out = []
    for type_id, reports in sorted(merged.items(), key=lambda kv: int(kv[0].split("-")[-1] or 0)):
        first = reports[0]
        desc = parse_description(first.description)
        avail = sum(r.available for r in reports)
        max_inst = desc.get("max_instance")
        out.append(
            VgpuType(
                gpu=gpu.bdf,
                interface=MDEV,
                type_id=type_id,
                name=first.name or type_id,
                short=short_name(first.name or type_id),
                framebuffer_mb=framebuffer_mb(desc),
                max_instances=int(max_inst) if max_inst and max_inst.isdigit() else None,
                available=avail,
                creatable=avail > 0,
                parents=tuple(r.parent for r in reports if r.available > 0),
            )
        )
    return out


def _vfio_types(host: Host, gpu: GpuView) -> list[VgpuType]:
    free = [v for v in gpu.vfs if current_type(host, v) == 0]
    listed: dict[int, str] = {}
    for vf in free[:1] or gpu.vfs[:1]:  # the list is card-wide: any VF reports it
        listed.update(dict(creatable(host, vf)))
    cat = for_device(_ids(host, gpu.bdf))
    known: dict[int, str] = dict(listed)
    if cat:  # describe types the card cannot take now too, so the table explains itself
        for t in cat.types:
            known.setdefault(t.id, cat.full_name(t))
    out = []
    for tid, name in sorted(known.items()):
        spec = cat.by_id(tid) if cat else None
        ok = tid in listed and bool(free)
        out.append(
            VgpuType(
                gpu=gpu.bdf,
                interface=VFIO,
                type_id=str(tid),
                name=name,
                short=short_name(name),
                framebuffer_mb=spec.framebuffer_mb if spec else None,
                max_instances=spec.max_instances if spec else None,
                available=None,
                creatable=ok,
                free_vfs=len(free),
            )
        )
    return out


def _ids(host: Host, bdf: str) -> str:
    vendor = (host.read_opt(host.pci_device(bdf, "vendor")) or "").removeprefix("0x")
    device = (host.read_opt(host.pci_device(bdf, "device")) or "").removeprefix("0x")
    return f"{vendor}:{device}"


def vgpus(host: Host, views: list[GpuView]) -> list[Vgpu]:
    """Every vGPU on the host: mdev instances on NVIDIA parents, and VFs with a vGPU type set."""
    parent_gpu = {p: g.bdf for g in views for p in g.parents}
    out: list[Vgpu] = []
    seen: dict[tuple[str, str], MdevType] = {}  # each type read once
    for inst in mdev_sysfs.instances(host):
        if inst.parent in parent_gpu:
            key = (inst.parent, inst.type_id)
            t = seen[key] = seen.get(key) or mdev_sysfs.read_type(host, inst.parent, inst.type_id)
            out.append(
                Vgpu(
                    id=inst.uuid,
                    gpu=parent_gpu[inst.parent],
                    interface=MDEV,
                    type_id=inst.type_id,
                    name=t.name or inst.type_id,
                    parent=inst.parent,
                    iommu_group=inst.iommu_group,
                    used_by=tuple(msgspec.structs.asdict(h) for h in inst.holders),
                )
            )
    rows: list[tuple[GpuView, str, int, int | None]] = []
    for g in views:
        for vf in g.vfs:
            cur = current_type(host, vf)
            if cur:
                link = host.link_name(host.pci_device(vf, "iommu_group"))
                rows.append((g, vf, cur, int(link) if link and link.isdigit() else None))
    holders = group_holders(host, {r[3] for r in rows if r[3] is not None})
    for g, vf, cur, group in rows:
        cat = for_device(_ids(host, g.bdf))
        spec = cat.by_id(cur) if cat else None
        name = cat.full_name(spec) if cat and spec else f"vGPU type {cur}"
        out.append(
            Vgpu(
                id=vf,
                gpu=g.bdf,
                interface=VFIO,
                type_id=str(cur),
                name=name,
                vf=vf,
                iommu_group=group,
                used_by=tuple(msgspec.structs.asdict(h) for h in holders.get(group, [])) if group is not None else (),
            )
        )
    return out


def with_definitions(host: Host, views: list[GpuView], items: list[Vgpu]) -> list[Vgpu]:
    """``items`` with their mdevctl definitions' start modes, then the legacy vGPUs that are only
    defined (a definition on a GPU's parent whose instance does not run: ``start --all`` or the boot
    service makes it again when it says ``auto``)."""
    parent_gpu = {p: g.bdf for g in views for p in g.parents}
    defs = [d for d in mdevctl.read_all(host)[0] if d.parent in parent_gpu]
    start = {d.uuid: d.start for d in defs}
    out = [msgspec.structs.replace(v, start=start.get(v.id)) if v.interface == MDEV else v for v in items]
    active = {v.id for v in items}
    names: dict[tuple[str, str], str] = {}
    for d in defs:
        if d.uuid in active:
            continue
        key = (d.parent, d.type_id)
        if key not in names:
            names[key] = host.read_opt(host.mdev_type(d.parent, d.type_id) / "name") or d.type_id
        out.append(
            Vgpu(d.uuid, parent_gpu[d.parent], MDEV, d.type_id, names[key], d.parent, active=False, start=d.start)
        )
        active.add(d.uuid)
    return out
