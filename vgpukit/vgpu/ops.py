"""Creating and removing vGPUs on either interface; all-or-nothing, verified by reading back."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..engine import Env, Step, execute
from ..errors import Busy, InvalidInput, NoCapacity, NotFound, Unsupported
from ..holders import group_holders
from ..mdev import ops as mdev_ops
from ..mdev.model import check_uuid
from ..pci import is_bdf, parse_bdf
from . import hostview
from .catalog import short_name
from .model import MDEV, GpuView, VgpuType
from .steps import SetVgpuType

log = logging.getLogger("vgpukit.vgpu")


@dataclass
class VgpuOutcome:
    plan: list[str] = field(default_factory=list)
    created: list[dict[str, Any]] = field(default_factory=list)


def find_type(offered: list[VgpuType], gpu: GpuView, wanted: str) -> VgpuType:
    """A type by human name (``A100-4C``, ``NVIDIA A100-4C``, ``GRID T4-4Q``, any case) or type id."""
    key = short_name(wanted)
    for t in offered:
        if t.short == key or t.type_id.lower() == wanted.strip().lower():
            return t
    names = ", ".join(t.short for t in offered) or "none"
    raise NotFound(
        f"{gpu.alias or gpu.bdf} ({gpu.name}) has no vGPU type {wanted!r}",
        device=gpu.bdf,
        value=wanted,
        hint=f"types reported by the host: {names}",
    )


def _require_interface(gpu: GpuView) -> str:
    if gpu.interface is None:
        raise Unsupported(
            f"{gpu.alias or gpu.bdf} ({gpu.name}) offers no vGPU types",
            device=gpu.bdf,
            hint="is the NVIDIA vGPU host driver loaded (and, on SR-IOV GPUs, VFs enabled with sriov-manage -e)?",
        )
    return gpu.interface


def create(env: Env, gpu: GpuView, wanted: str, count: int) -> VgpuOutcome:
    host = env.host
    if count < 1:
        raise InvalidInput(f"--count must be at least 1, not {count}", value=count)
    interface = _require_interface(gpu)
    t = find_type(hostview.types(host, gpu), gpu, wanted)
    if interface == MDEV:
        if (t.available or 0) < count:
            raise NoCapacity(
                f"{gpu.alias or gpu.bdf} cannot take {count} x {t.name}: the host reports {t.available} available",
                device=gpu.bdf,
                hint="vGPUs on one GPU share its framebuffer (and, time-sliced, one type); nothing was created",
            )
        res = mdev_ops.create(env, t.type_id, count=count, parents=list(gpu.parents))
        return VgpuOutcome(res.plan, [{"id": c.uuid, "parent": c.parent, "type": t.name} for c in res.instances])
    return _create_vfio(env, gpu, t, count)


def _create_vfio(env: Env, gpu: GpuView, t: VgpuType, count: int) -> VgpuOutcome:
    host = env.host
    free = [v for v in gpu.vfs if hostview.current_type(host, v) == 0]
    if len(free) < count:
        raise NoCapacity(f"{count} x {t.short} need {count} free VFs; {gpu.bdf} has {len(free)}", device=gpu.bdf)
    if not t.creatable:
        raise NoCapacity(
            f"{gpu.alias or gpu.bdf} cannot take a {t.short} now: not in its creatable_vgpu_types",
            device=gpu.bdf,
            hint="vGPUs on one GPU share a type and its framebuffer; see: vgpukit vgpu types",
        )
    todo = free[:count]
    steps: list[Step] = [SetVgpuType(vf, t.type_id, t.name, check_creatable=True) for vf in todo]
    out = VgpuOutcome(plan=[s.describe() for s in steps])
    execute(env, steps)
    out.created = [{"id": vf, "vf": vf, "type": t.name} for vf in todo]
    return out


def remove(env: Env, views: list[GpuView], ids: list[str]) -> list[str]:
    """Remove vGPUs by id: an mdev UUID (legacy) or a VF address (vendor VFIO). Checked before acting."""
    host = env.host
    uuids: list[str] = []
    vfs: list[str] = []
    for raw in ids:
        if is_bdf(raw):
            vfs.append(parse_bdf(raw))
        else:
            uuids.append(check_uuid(raw))
    all_vfs = {vf for g in views for vf in g.vfs}
    for vf in vfs:
        if vf not in all_vfs or hostview.current_type(host, vf) == 0:
            raise NotFound(f"{vf} has no vGPU", device=vf, hint="see: vgpukit vgpu list")
    groups = {vf: host.link_name(host.pci_device(vf, "iommu_group")) for vf in vfs}
    held = group_holders(host, {int(g) for g in groups.values() if g and g.isdigit()})
    for vf, g in groups.items():
        users = held.get(int(g), []) if g and g.isdigit() else []
        if users:
            who = ", ".join(h.describe() for h in users)
            raise Busy(
                f"vGPU {vf} is in use by {who}", device=vf, hint="stop or detach the VM first; nothing was removed"
            )
    mdev_parents = {p for g in views for p in g.parents}
    from ..mdev import sysfs as mdev_sysfs

    for u in uuids:
        inst = mdev_sysfs.find_instance(host, u)
        if inst is not None and inst.parent not in mdev_parents:
            raise InvalidInput(f"{u} is an mdev on {inst.parent}, not a vGPU", value=u, hint="use: vgpukit mdev remove")
    done = mdev_ops.remove(env, uuids) if uuids else []  # all-or-nothing checks of its own
    clear: list[Step] = [SetVgpuType(vf, "0") for vf in vfs]
    execute(env, clear)
    return done + [s.describe() for s in clear]
