"""The one vGPU planner: typed requests in, engine steps (or a typed refusal, raised) out.

Every host rule of NVIDIA vGPUs lives here, for every door (``vgpukit vgpu``, ``vgpukit apply``):
the GPU offers vGPUs at all, the type is one it offers, capacity and type homogeneity as the host
reports them (legacy: ``available_instances``; vendor VFIO: ``creatable_vgpu_types`` and free VFs;
docs/vgpu.md), VFs in use. Legacy vGPUs are mdevs: their steps (call-outs included) come from
:mod:`vgpukit.mdev.planner`. :func:`read` gathers the facts; the planner never executes, prints or
parses command lines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from ..engine import Step
from ..errors import InUse, InvalidInput, NoCapacity, NotFound, Unsupported
from ..exclusion import Exclusions
from ..holders import Holder, group_holders
from ..host import Host
from ..inputs import at
from ..mdev import converge as mdev_converge
from ..mdev import planner as mdev_planner
from ..mdev.model import Definition, MdevInstance, check_uuid
from ..pci import is_bdf, parse_bdf
from . import hostview
from .catalog import for_device, short_name
from .model import MDEV, GpuView, VgpuType
from .steps import SetVgpuType

if TYPE_CHECKING:
    from ..nvml import Nvml


class Facts(msgspec.Struct, frozen=True):
    """One GPU as the planner needs it: its types, and (vendor VFIO) each VF's type and holders."""

    gpu: GpuView
    types: tuple[VgpuType, ...]
    current: dict[str, int] = msgspec.field(default_factory=dict)  # VF -> current type id (0: none)
    holders: dict[str, tuple[Holder, ...]] = msgspec.field(default_factory=dict)  # VF -> who holds its group
    ids: str = ""  # the GPU's vendor:device (its catalogue)
    exclusions: Exclusions | None = None  # the one predicate (quarantine, health), asked when a vGPU is made

    @property
    def label(self) -> str:
        return self.gpu.alias or self.gpu.bdf


def read(host: Host, gpu: GpuView, ids: str = "", nvml: Callable[[], Nvml | None] | None = None) -> Facts:
    """The GPU's facts; ``nvml``: what the one exclusion predicate asks about its health (a lost GPU),
    read only when a rule asks."""
    current = {v: hostview.current_type(host, v) for v in gpu.vfs}
    groups = {v: host.link_name(host.pci_device(v, "iommu_group")) for v in gpu.vfs if current[v]}
    held = group_holders(host, {int(g) for g in groups.values() if g and g.isdigit()})
    holders = {v: tuple(held.get(int(g), [])) for v, g in groups.items() if g and g.isdigit()}
    return Facts(gpu, tuple(hostview.types(host, gpu)), current, holders, ids, Exclusions(host, nvml))


@dataclass
class VgpuPlan:
    steps: list[Step] = field(default_factory=list)
    created: list[dict[str, Any]] = field(default_factory=list)


# ----------------------------------------------------------------------------- the rules
def require_interface(gpu: GpuView) -> str:
    if gpu.interface is None:
        label = gpu.alias or gpu.bdf
        hint = "is the NVIDIA vGPU host driver loaded (and, on SR-IOV GPUs, VFs enabled with sriov-manage -e)?"
        if gpu.missing_vfs:  # sriov_numvfs says VFs are configured, but a PF reset took them away
            hint = (
                f"{gpu.missing_vfs} of its VFs are missing (a PF reset takes them away): re-create them with"
                f" vgpukit sriov enable {label} --vfs {gpu.num_vfs} (or vgpukit apply); nothing was changed"
            )
        err = Unsupported(f"{label} ({gpu.name}) offers no vGPU types", device=gpu.bdf, hint=hint)
        raise at(err, "device")
    return gpu.interface


def find_type(offered: list[VgpuType] | tuple[VgpuType, ...], gpu: GpuView, wanted: str) -> VgpuType:
    """A type by human name (``A100-4C``, ``NVIDIA A100-4C``, ``GRID T4-4Q``, any case) or type id."""
    key = short_name(wanted)
    for t in offered:
        if t.short == key or t.type_id.lower() == wanted.strip().lower():
            return t
    names = ", ".join(t.short for t in offered) or "none"
    err = NotFound(
        f"{gpu.alias or gpu.bdf} ({gpu.name}) has no vGPU type {wanted!r}",
        device=gpu.bdf,
        value=wanted,
        hint=f"types reported by the host: {names}",
    )
    raise at(err, "type")


def no_room(facts: Facts, count: int, name: str, why: str) -> NoCapacity:
    """The one refusal for vGPUs that do not fit (capacity, or the GPU holds another type now)."""
    err = NoCapacity(
        f"{facts.label} cannot take {count} x {name}: {why}",
        device=facts.gpu.bdf,
        hint="vGPUs on one GPU share its framebuffer and, time-sliced, one type; see: vgpukit vgpu types;"
        " nothing was changed",
    )
    return at(err, "count")


def in_use(vf: str, users: tuple[Holder, ...] | list[Holder]) -> InUse:
    """The one refusal for a vGPU (a VF) in use that a plan would clear."""
    who = ", ".join(h.describe() for h in users)
    return InUse(f"vGPU {vf} is in use by {who}", device=vf, hint="stop or detach the VM first; nothing was changed")


def _mdev_room(facts: Facts, t: VgpuType, count: int) -> None:
    if (t.available or 0) < count:
        raise no_room(facts, count, t.name, f"the host reports {t.available or 0} available")


def _vfio_room(facts: Facts, t: VgpuType, count: int, free: int) -> None:
    if free < count:
        raise no_room(facts, count, t.name, f"{count} free VFs needed, {free} free")
    if not t.creatable:
        raise no_room(facts, count, t.name, "not in its creatable_vgpu_types now")


# ----------------------------------------------------------------------------- create / remove
def no_definitions(gpu: GpuView, what: str) -> Unsupported:
    """The one refusal for persistence asked of vGPUs on VFs (vendor VFIO): they have no definition files."""
    return Unsupported(
        f"{what} on {gpu.alias or gpu.bdf}'s VFs (vendor-specific VFIO) have no definitions to keep",
        device=gpu.bdf,
        hint="keep them across reboots with a host config applied at boot: vgpukit boot-unit (docs/fleet.md)",
    )


def create(
    facts: Facts, mdev: mdev_planner.Facts | None, wanted: str, count: int, define: bool = False, auto: bool = False
) -> VgpuPlan:
    """``count`` vGPUs of type ``wanted`` on the GPU (legacy: mdevs on its parents, with ``mdev``'s facts);
    ``define``: with definitions that keep them (started at boot with ``auto``)."""
    if count < 1:
        raise InvalidInput(f"--count must be at least 1, not {count}", value=count)
    if auto and not define:
        raise InvalidInput("--auto needs --define (it is the start mode of the persistent definition)")
    label = f"{facts.gpu.alias} ({facts.gpu.bdf})" if facts.gpu.alias else facts.gpu.bdf
    refused = facts.exclusions.check(facts.gpu.bdf, label) if facts.exclusions is not None else None
    if refused is not None:  # nothing is carved from a quarantined or unusable GPU (every door's words),
        raise refused  # said first: a device the operator took out is the answer, whatever it offers
    interface = require_interface(facts.gpu)
    t = find_type(facts.types, facts.gpu, wanted)
    if interface == MDEV:
        assert mdev is not None
        _mdev_room(facts, t, count)
        req = mdev_planner.Create(t.type_id, count, among=facts.gpu.parents, define=define, auto=auto)
        todo = mdev_planner.create(mdev, req)
        made = [{"id": d.uuid, "parent": d.parent, "type": t.name} for d in todo.instances]
        start = "auto" if auto else "manual"
        return VgpuPlan(todo.steps, [{**m, "start": start} if define else m for m in made])
    if define:
        raise no_definitions(facts.gpu, "vGPUs")
    free = [v for v in facts.gpu.vfs if facts.current.get(v, 0) == 0]
    _vfio_room(facts, t, count, len(free))
    todo_vfs = free[:count]
    steps: list[Step] = [SetVgpuType(vf, t.type_id, t.name, check_creatable=True) for vf in todo_vfs]
    return VgpuPlan(steps, [{"id": vf, "vf": vf, "type": t.name} for vf in todo_vfs])


def _legacy(gpus: list[Facts], mdev: mdev_planner.Facts, uid: str) -> tuple[MdevInstance | None, list[Definition]]:
    """The instance and definitions of the legacy vGPU ``uid`` (refused when they are another parent's)."""
    parents = {p for f in gpus for p in f.gpu.parents}
    inst = mdev.instance(uid)
    defs = [d for d in mdev.definitions if d.uuid == uid]
    other = inst.parent if inst is not None and inst.parent not in parents else None
    other = other or next((d.parent for d in defs if d.parent not in parents), None)
    if other is not None:
        raise InvalidInput(f"{uid} is an mdev on {other}, not a vGPU", value=uid, hint="use: vgpukit mdev")
    return inst, defs


def _split(ids: list[str]) -> tuple[list[str], list[str]]:
    """(mdev UUIDs, VF addresses) of vGPU ids, checked."""
    uuids: list[str] = []
    vfs: list[str] = []
    for raw in ids:
        if is_bdf(raw):
            vfs.append(parse_bdf(raw))
        else:
            uuids.append(check_uuid(raw))
    return list(dict.fromkeys(uuids)), list(dict.fromkeys(vfs))


def remove(gpus: list[Facts], mdev: mdev_planner.Facts, ids: list[str], keep_definition: bool = False) -> list[Step]:
    """Remove vGPUs by id: an mdev UUID (legacy) or a VF address (vendor VFIO); all checked first. A legacy
    vGPU's definitions go with it (else it would come back at boot), unless ``keep_definition``; a vGPU
    that is only defined is removed by removing its definitions."""
    uuids, vfs = _split(ids)
    current = {v: n for f in gpus for v, n in f.current.items()}
    holders = {v: h for f in gpus for v, h in f.holders.items()}
    for vf in vfs:
        if not current.get(vf):
            raise NotFound(f"{vf} has no vGPU", device=vf, hint="see: vgpukit vgpu list")
        if holders.get(vf):
            raise in_use(vf, holders[vf])
    active: list[str] = []
    undefine: list[Step] = []
    for u in uuids:
        inst, defs = _legacy(gpus, mdev, u)
        if inst is None and not defs:
            raise NotFound(f"no vGPU {u} on this host", value=u, hint="see: vgpukit vgpu list")
        if inst is not None:
            active.append(u)
        if defs and not keep_definition:
            undefine += mdev_planner.undefine(mdev, u, [mdev.path(d) for d in defs], None).steps
    steps = mdev_planner.remove(mdev, active).steps if active else []
    return steps + undefine + [SetVgpuType(vf, "0") for vf in vfs]


def _no_vf_definitions(gpus: list[Facts], vfs: list[str]) -> None:
    for f in gpus:
        for vf in vfs:
            if vf in f.gpu.vfs:
                raise no_definitions(f.gpu, f"vGPUs such as {vf}")
    if vfs:
        raise NotFound(f"{vfs[0]} has no vGPU", device=vfs[0], hint="see: vgpukit vgpu list")


def define(gpus: list[Facts], mdev: mdev_planner.Facts, ids: list[str], auto: bool) -> list[Step]:
    """Definitions for running legacy vGPUs (start ``auto``: made again at boot; else ``manual``), or a
    new start mode for defined ones (running or not); refused for vGPUs on VFs, which have none."""
    uuids, vfs = _split(ids)
    _no_vf_definitions(gpus, vfs)
    steps: list[Step] = []
    for u in uuids:
        inst, defs = _legacy(gpus, mdev, u)
        if inst is None and not defs:
            raise NotFound(f"no vGPU {u} on this host", value=u, hint="see: vgpukit vgpu list")
        made = inst if inst is not None else defs[0]
        d = Definition(u, made.parent, made.type_id, "auto" if auto else "manual")
        steps += mdev_planner.put(mdev, d)[0].steps
    return steps


def undefine(gpus: list[Facts], mdev: mdev_planner.Facts, ids: list[str]) -> list[Step]:
    """Delete the definitions of legacy vGPUs (running ones keep running, and do not come back at boot);
    a running vGPU without one: nothing to do."""
    uuids, vfs = _split(ids)
    _no_vf_definitions(gpus, vfs)
    steps: list[Step] = []
    for u in uuids:
        inst, defs = _legacy(gpus, mdev, u)
        if inst is None and not defs:
            raise NotFound(f"no vGPU {u} on this host", value=u, hint="see: vgpukit vgpu list")
        if defs:
            steps += mdev_planner.undefine(mdev, u, [mdev.path(d) for d in defs], None).steps
    return steps


# ----------------------------------------------------------------------------- converge (apply)
def converge_mdev(
    facts: Facts, mdev: mdev_planner.Facts, wants: list[tuple[str, int]]
) -> tuple[list[Step], list[Step]]:
    """Exactly ``count`` legacy vGPUs of each wanted type on the GPU (others removed)."""
    chosen = [(find_type(facts.types, facts.gpu, name), count) for name, count in wants]
    want: mdev_planner.Wants = {t.type_id: (count, ()) for t, count in chosen}
    have: dict[str, int] = {}
    for i in mdev.instances:
        if i.parent in facts.gpu.parents:
            have[i.type_id] = have.get(i.type_id, 0) + 1
    if not any(tid not in want or n > want[tid][0] for tid, n in have.items()):  # nothing is freed first
        for t, count in chosen:
            if count > have.get(t.type_id, 0):
                _mdev_room(facts, t, count - have.get(t.type_id, 0))
    return mdev_converge.converge(mdev, list(facts.gpu.parents), want)


def converge_vfs(facts: Facts, wants: list[tuple[str, int]], fresh: list[str] | None) -> tuple[list[Step], list[Step]]:
    """vGPUs on VFs (vendor VFIO): each VF carries one type. ``fresh``: the VFs the plan's SR-IOV steps
    create (none has a vGPU yet; their types come from the GPU's catalogue)."""
    gpu = facts.gpu
    vfs = fresh if fresh is not None else list(gpu.vfs)
    if fresh is None:
        require_interface(gpu)
    cat = for_device(facts.ids) if facts.ids else None
    want: dict[str, tuple[int, str]] = {}
    offered: dict[str, VgpuType] = {}
    for name, count in wants:
        spec = cat.by_name(name) if cat else None
        if spec is None and cat and name.isdigit():
            spec = cat.by_id(int(name))
        if spec is not None and cat is not None:
            want[str(spec.id)] = (count, cat.full_name(spec))
        else:
            t = find_type(facts.types, gpu, name)
            want[t.type_id] = (count, t.name)
    offered.update({t.type_id: t for t in facts.types})
    cur = {v: ("0" if fresh is not None else str(facts.current.get(v, 0))) for v in vfs}
    clear: list[str] = []
    for tid in {t for t in cur.values() if t != "0"}:
        have = [v for v in vfs if cur[v] == tid]
        clear += have[want.get(tid, (0, ""))[0] :]
    for v in clear:
        if facts.holders.get(v):
            raise in_use(v, facts.holders[v])
    free = [v for v in vfs if cur[v] == "0" or v in clear]
    sets: list[Step] = []
    for tid, (count, name) in want.items():
        need = count - sum(1 for v in vfs if cur[v] == tid and v not in clear)
        known = offered.get(tid)
        if need > 0 and known is not None and not clear and fresh is None:
            _vfio_room(facts, known, need, len(free))  # nothing freed first: the host's report holds
        if need > len(free):
            raise no_room(facts, need, name, f"{need} free VFs needed, {len(free)} free")
        sets += [SetVgpuType(v, tid, name, check_creatable=True) for v in free[: max(0, need)]]
        free = free[max(0, need) :]
    return [SetVgpuType(v, "0") for v in clear], sets
