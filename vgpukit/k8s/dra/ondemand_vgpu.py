"""vGPUs made on demand: a DRA device per vGPU a GPU could hold of each type it offers, created at
prepare (an mdev on a legacy parent) and removed at unprepare,
through the vGPU planner (:mod:`vgpukit.vgpu.planner`: the type offered, capacity, one type per GPU
as the host reports it, a vGPU in use) and the change engine.

``gpu-0000-3b-00-0-vgpu-t4-4q-2`` is the third T4-4Q the GPU at 0000:3b:00.0 could hold: the index
only tells the devices of a type apart (the scheduler picks any whose counters fit). Each GPU has a
counter set ``gpu-0000-3b-00-0-vgpu`` with one counter, ``framebuffer`` (bytes: what its types share,
less what vGPUs no claim made use); a device consumes its type's framebuffer.

Offered: per type, the devices claims made (allocated: they stay) and as many more as the host can still
create now (the vGPU area's ``available_instances``: 0 for every other type once a GPU holds a vGPU of
one type, the legacy driver's rule), so the scheduler never allocates a vGPU the host would refuse.
Attributes: those of an existing vGPU (:func:`.slices.device_entry`: ``vgpuType`` in the device
plugin's lower-case form, ``vgpuTypeID``, ``productName`` as NVML names the GPU, ``numaNode``...) plus
``onDemand``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...engine.env import Env
from ...engine.step import Step
from ...host import Host
from ...logs import logger
from ...mdev import planner as mdev_planner
from ...node.dra_names import device_name
from ...node.inventory import PREFIX, Device, resource_part
from ...pci import PciDevice, Scan
from ...vgpu import hostview
from ...vgpu import planner as vgpu_planner
from ...vgpu.catalog import short_name
from ...vgpu.model import MDEV, GpuView, VgpuType
from .attributes import standard
from .devices import DraDevice

log = logger("vgpukit.k8s.dra")
MIB = 1024 * 1024


class MadeVgpu(msgspec.Struct, frozen=True):
    name: str
    gpu: GpuView
    type: VgpuType


def _views(env: Env, pci: dict[str, PciDevice] | None = None) -> list[GpuView]:
    """The GPUs vGPUs are made on demand on: legacy mdev parents. A vendor-VFIO vGPU (a VF on the
    ``nvidia`` driver with a type) has no CDI entry for a container, so none is offered. ``pci``: the
    caller's PCI snapshot; where it holds no NVIDIA GPU, none (the bus not read again: a NIC host's)."""
    if pci is not None and not any(hostview.is_nvidia_gpu(d) for d in pci.values()):
        return []
    return [g for g in hostview.gpus(env.host, Scan(env.host)) if g.interface == MDEV]


def type_label(t: VgpuType | str) -> str:
    """A vGPU type as the ``vgpuType`` attribute and the device plugin's resource say it: ``t4-4q``."""
    return resource_part(t.short if isinstance(t, VgpuType) else short_name(t))


def existing_types(env: Env) -> dict[str, str]:
    """The type id of every existing vGPU (mdev UUID or VF address -> ``nvidia-232``), the vGPU area's view."""
    return types_on(env.host, Scan(env.host))


def types_on(host: Host, scan: Scan) -> dict[str, str]:
    """:func:`existing_types` through ``scan`` (the watch's model keeps one between its refreshes)."""
    return {v.id: v.type_id for v in hostview.vgpus(host, hostview.gpus(host, scan))}


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
    env: Env,
    made: list[dict[str, Any]],
    pci: dict[str, PciDevice],
    names: dict[str, str] | None = None,
) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """A slice part per GPU offering vGPUs (by counter set name; an unusable GPU's is tainted or left out
    by the caller, :mod:`.lost`), and the ids of the vGPUs claims made (``made``: the made records' vGPU
    entries; not published as static devices). ``names``: the GPUs' names as NVML gives them
    (``productName``, as an existing vGPU's)."""
    parts: dict[str, dict[str, Any]] = {}
    views = _views(env, pci)
    vgpus = hostview.vgpus(env.host, views)
    ids = {str(m["id"]) for m in made}
    claimed = {str(m["device"]) for m in made}
    hidden = {v.id for v in vgpus if v.id in ids}
    for gpu in views:
        types = hostview.types(env.host, gpu)
        sizes = {t.type_id: (t.framebuffer_mb or 0) * MIB for t in types}
        total = max(((t.framebuffer_mb or 0) * (t.max_instances or 0) * MIB for t in types), default=0)
        used = sum(sizes.get(v.type_id, 0) for v in vgpus if v.gpu == gpu.bdf and v.id not in ids)
        name = counter_set(gpu)
        fn = pci.get(gpu.bdf)
        devices = []
        left = {t.type_id: t.available or 0 for t in types}  # what the host can still create of each type
        for m in catalog(gpu, types).values():
            if m.name not in claimed:
                if left[m.type.type_id] <= 0:
                    continue
                left[m.type.type_id] -= 1
            attrs: dict[str, Any] = {
                "kind": {"string": "mdev" if gpu.interface == MDEV else "vf"},
                "vgpuType": {"string": type_label(m.type)},
                "vgpuTypeID": {"string": m.type.type_id},
                "parentBusID": {"string": gpu.bdf},
                "productName": {"string": (names or {}).get(gpu.bdf) or gpu.name},
                "onDemand": {"bool": True},
            }
            if fn is not None and fn.host_bridge:
                attrs["pcieRoot"] = {"string": fn.host_bridge}
            if fn is not None and fn.numa_node is not None and fn.numa_node >= 0:
                attrs["numaNode"] = {"int": fn.numa_node}
            # the standard ones an existing vGPU carries (its mdevUUID once made: in the claim's metadata)
            attrs.update(standard("vgpu", "", gpu.bdf, fn.host_bridge if fn else None, fn.numa_node if fn else None))
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
