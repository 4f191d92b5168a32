"""Creating and removing vGPUs on either interface; all-or-nothing, verified by reading back."""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass, field
from typing import Any

from ..errors import Busy, InvalidInput, NoCapacity, NotFound, Unsupported, VerifyFailed, VgpukitError
from ..holders import group_holders
from ..host import Host
from ..mdev import ops as mdev_ops
from ..mdev.model import check_uuid
from ..pci import is_bdf, parse_bdf
from . import hostview
from .catalog import short_name
from .model import MDEV, GpuView, VgpuType

log = logging.getLogger("vgpukit.vgpu")


@dataclass
class Outcome:
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


def create(host: Host, gpu: GpuView, wanted: str, count: int) -> Outcome:
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
        res = mdev_ops.create(host, t.type_id, count=count, parents=list(gpu.parents))
        return Outcome(res.plan, [{"id": c.uuid, "parent": c.parent, "type": t.name} for c in res.instances])
    return _create_vfio(host, gpu, t, count)


def _create_vfio(host: Host, gpu: GpuView, t: VgpuType, count: int) -> Outcome:
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
    out = Outcome(plan=[f"set {vf} nvidia/current_vgpu_type = {t.type_id} ({t.name})" for vf in todo])
    if host.dry_run:
        out.created = [{"id": vf, "vf": vf, "type": t.name} for vf in todo]
        return out
    made: list[str] = []
    try:
        for vf in todo:
            # The list shrinks as the card fills: ask the host before each one.
            if int(t.type_id) not in dict(hostview.creatable(host, vf)):
                raise NoCapacity(
                    f"{gpu.alias or gpu.bdf} has no room for another {t.short} after {len(made)}"
                    " (its creatable_vgpu_types no longer lists it)",
                    device=gpu.bdf,
                )
            _set_type(host, vf, t.type_id)
            made.append(vf)
    except VgpukitError as err:
        for vf in reversed(made):
            try:
                _set_type(host, vf, "0")
            except VgpukitError as exc:
                log.warning("rollback: could not clear %s: %s", vf, exc)
        if made:
            err.message += f"; rolled back the {len(made)} vGPU(s) this command had created"
        raise
    out.created = [{"id": vf, "vf": vf, "type": t.name} for vf in made]
    return out


def _set_type(host: Host, vf: str, type_id: str) -> None:
    path = host.pci_device(vf, "nvidia", "current_vgpu_type")
    try:
        host.write(path, type_id)
    except VgpukitError as err:
        if err.errno == errno.EBUSY:
            raise Busy(
                f"{vf} refused vGPU type {type_id}: busy",
                device=vf,
                errno=err.errno,
                hint="it already has a vGPU or a VM holds it",
            ) from err
        if err.errno in (errno.ENOSPC, errno.EUSERS):
            raise NoCapacity(f"{vf}: the GPU has no room for vGPU type {type_id}", device=vf, errno=err.errno) from err
        raise
    if str(hostview.current_type(host, vf)) != type_id:
        raise VerifyFailed(f"{vf}: current_vgpu_type does not read back {type_id}", device=vf)


def remove(host: Host, views: list[GpuView], ids: list[str]) -> list[str]:
    """Remove vGPUs by id: an mdev UUID (legacy) or a VF address (vendor VFIO). Checked before acting."""
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
    steps = mdev_ops.remove(host, uuids) if uuids else []  # all-or-nothing checks of its own
    for vf in vfs:
        steps.append(f"clear {vf} nvidia/current_vgpu_type (write 0)")
        if not host.dry_run:
            _set_type(host, vf, "0")
    return steps
