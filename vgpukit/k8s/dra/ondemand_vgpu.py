"""vGPUs made on demand: a DRA device per vGPU a GPU could hold of each type it offers, created at
prepare (an mdev on a legacy parent) and removed at unprepare,
through the vGPU planner (:mod:`vgpukit.vgpu.planner`: the type offered, capacity, one type per GPU
as the host reports it, a vGPU in use) and the change engine.

``gpu-0000-3b-00-0-vgpu-t4-4q-2`` is the third T4-4Q the GPU at 0000:3b:00.0 could hold: the index
only tells the devices of a type apart (the scheduler picks any whose counters fit). Each GPU has a
counter set ``gpu-0000-3b-00-0-vgpu`` with one counter, ``framebuffer`` (bytes: what its types share,
less what vGPUs no claim made use); a device consumes its type's framebuffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...engine.env import Env
from ...engine.step import Step
from ...logs import logger
from ...mdev import planner as mdev_planner
from ...pci import PciDevice, Scan
from ...vgpu import hostview
from ...vgpu import planner as vgpu_planner
from ...vgpu.model import MDEV, GpuView, VgpuType
from ..inventory import PREFIX, Device
from .devices import DraDevice, device_name

log = logger("vgpukit.k8s.dra")
MIB = 1024 * 1024


@dataclass(frozen=True)
class MadeVgpu:
    name: str
    gpu: GpuView
    type: VgpuType


def _views(env: Env) -> list[GpuView]:
    """The GPUs vGPUs are made on demand on: legacy mdev parents. A vendor-VFIO vGPU (a VF on the
    ``nvidia`` driver with a type) has no CDI entry for a container, so none is offered."""
    return [g for g in hostview.gpus(env.host, Scan(env.host)) if g.interface == MDEV]


def counter_set(gpu: GpuView) -> str:
    return device_name("gpu", gpu.bdf) + "-vgpu"


def catalog(gpu: GpuView, types: list[VgpuType]) -> dict[str, MadeVgpu]:
    out: dict[str, MadeVgpu] = {}
    for t in types:
        for k in range(t.max_instances or 0):
            name = device_name("gpu", f"{gpu.bdf}-vgpu-{t.short}-{k}")
            out[name] = MadeVgpu(name, gpu, t)
    return out


def lookup(env: Env, names: list[str]) -> dict[str, MadeVgpu]:
    """The made-on-demand vGPU devices among ``names``."""
    want = {n for n in names if "-vgpu-" in n}
    out: dict[str, MadeVgpu] = {}
    for gpu in _views(env) if want else []:
        if any(n.startswith(counter_set(gpu)[: -len("-vgpu")] + "-vgpu-") for n in want):
            table = catalog(gpu, hostview.types(env.host, gpu))
            out.update({n: table[n] for n in want if n in table})
    return out


def exists(env: Env, entry: dict[str, Any]) -> bool:
    """Whether the vGPU a made record names is there (an mdev instance, a VF with a vGPU type)."""
    ident = str(entry["id"])
    if entry.get("interface") == MDEV:
        return env.host.exists(env.host.mdev_devices() / ident)
    return hostview.current_type(env.host, ident) != 0


def plan(env: Env, m: MadeVgpu) -> tuple[list[Step], dict[str, Any]]:
    """The vGPU planner's steps creating one vGPU of the device's type, and its made-record entry."""
    facts = vgpu_planner.read(env.host, m.gpu, nvml=lambda: env.nvml)
    mdev = mdev_planner.read(env.host, nvml=lambda: env.nvml) if m.gpu.interface == MDEV else None
    todo = vgpu_planner.create(facts, mdev, m.type.type_id, 1)
    entry = {
        "kind": "vgpu",
        "device": m.name,
        "gpu": m.gpu.bdf,
        "interface": m.gpu.interface,
        "type": m.type.type_id,
        "id": str(todo.created[0]["id"]),
    }
    return list(todo.steps), entry


def device(entry: dict[str, Any]) -> DraDevice:
    """The made vGPU as a device: its CDI entry is the mdev's or the VF's."""
    ident, gpu = str(entry["id"]), str(entry["gpu"])
    if entry.get("interface") == MDEV:
        return DraDevice(str(entry["device"]), "mdev", Device(ident, gpu, None, f"{PREFIX}/mdev={ident}"))
    return DraDevice(str(entry["device"]), "vf", Device(ident, ident, None, f"{PREFIX}/vf={ident}"))


def remove_steps(env: Env, entries: list[dict[str, Any]]) -> list[Step]:
    """The vGPU planner's steps removing the made vGPUs still there (refused while a VM or process uses one)."""
    ids = [str(e["id"]) for e in entries if exists(env, e)]
    if not ids:
        return []
    scan = Scan(env.host)
    gpus = [vgpu_planner.read(env.host, g, scan.device(g.bdf).ids) for g in _views(env)]
    return vgpu_planner.remove(gpus, mdev_planner.read(env.host, definitions=False), ids)


def slice_parts(
    env: Env, made: set[str], pci: dict[str, PciDevice], sick: dict[str, str]
) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """A slice part per usable GPU offering vGPUs (by counter set name), and the ids of the vGPUs claims
    made (``made``: not published as static devices)."""
    parts: dict[str, dict[str, Any]] = {}
    views = _views(env)
    vgpus = hostview.vgpus(env.host, views)
    hidden = {v.id for v in vgpus if v.id in made}
    for gpu in views:
        if gpu.bdf in sick:
            continue
        types = hostview.types(env.host, gpu)
        sizes = {t.type_id: (t.framebuffer_mb or 0) * MIB for t in types}
        total = max(((t.framebuffer_mb or 0) * (t.max_instances or 0) * MIB for t in types), default=0)
        used = sum(sizes.get(v.type_id, 0) for v in vgpus if v.gpu == gpu.bdf and v.id not in made)
        name = counter_set(gpu)
        fn = pci.get(gpu.bdf)
        devices = []
        for m in catalog(gpu, types).values():
            attrs: dict[str, Any] = {
                "kind": {"string": "mdev" if gpu.interface == MDEV else "vf"},
                "vgpuType": {"string": m.type.short},
                "vgpuTypeID": {"string": m.type.type_id},
                "parentBusID": {"string": gpu.bdf},
                "productName": {"string": gpu.name},
                "onDemand": {"bool": True},
            }
            if fn is not None and fn.host_bridge:
                attrs["pcieRoot"] = {"string": fn.host_bridge}
            fb = {"value": str(sizes[m.type.type_id])}
            devices.append(
                {
                    "name": m.name,
                    "attributes": attrs,
                    "capacity": {"memory": fb},
                    "consumesCounters": [{"counterSet": name, "counters": {"framebuffer": fb}}],
                }
            )
        counters = {"framebuffer": {"value": str(max(total - used, 0))}}
        parts[name] = {"sharedCounters": [{"name": name, "counters": counters}], "devices": devices}
    return parts, hidden
