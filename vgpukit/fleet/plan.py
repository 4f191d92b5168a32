"""The whole difference between a host and a host config, as one list of engine steps.

Every area is planned from the host as it is, by the area's own planners and steps (SR-IOV:
:func:`vgpukit.sriov.ops.plan_enable`; MIG: mig-parted's planner, handed in by the front end);
every refusal (in use, no capacity, unknown type) is raised here, before the first change. The
steps come out in a dependency-safe order:

1. removals (mdev instances, vGPU types cleared) -- they free VFs and capacity;
2. SR-IOV VF counts and drivers -- VFs exist before anything is put on them;
3. vfio-pci bindings;  4. MIG layouts;  5. mdev / vGPU creations (on VFs made in 2);  6. QoS config.

Devices (and areas) the config does not mention are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import naming
from ..engine import Env, Step
from ..engine.files import PutFile
from ..errors import Busy, Conflict, InUse, InvalidInput, NotFound, Unsupported, VgpukitError
from ..holders import OpenFiles, group_holders
from ..mdev import sysfs as mdev_sysfs
from ..mdev.model import MdevInstance, new_uuid
from ..mdev.placement import candidates
from ..mdev.placement import plan as place
from ..mdev.steps import CreateMdev, RemoveMdev
from ..mig import config as migconfig
from ..pci import PciDevice, Scan, vf_address
from ..sriov import binding, ops
from ..sriov.model import read_pf
from ..sriov.steps import BindDriver
from ..sriov.usage import pci_users
from ..vgpu import hostview
from ..vgpu.catalog import for_device, short_name
from ..vgpu.model import MDEV, GpuView
from ..vgpu.ops import find_type
from ..vgpu.steps import SetVgpuType
from .document import HostConfig, Selector, VgpuWant

AREAS = ("sriov", "bind", "mdev", "vgpu", "mig", "qos")
IDS_RE = re.compile(r"([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\Z")
MigPlanner = Callable[[list[migconfig.Entry]], list[Step]]


@dataclass
class Plan:
    steps: list[tuple[str, Step]] = field(default_factory=list)

    def add(self, area: str, steps: list[Step]) -> None:
        self.steps += [(area, s) for s in steps]

    @property
    def plain(self) -> list[Step]:
        return [s for _, s in self.steps]

    def to_json(self) -> dict[str, Any]:
        counts = dict.fromkeys(AREAS, 0)
        for area, _ in self.steps:
            counts[area] += 1
        return {
            "plan": [s.describe() for _, s in self.steps],
            "steps": [{"area": a, **s.to_dict()} for a, s in self.steps],
            "areas": counts,
        }


def matches(dev: PciDevice, pattern: str) -> bool:
    """``vendor:device`` (hex) or a case-insensitive part of the model name."""
    m = IDS_RE.match(pattern)
    if m:
        return dev.ids == f"{m.group(1)}:{m.group(2)}".lower()
    return pattern.lower() in dev.name.lower()


class _Ctx:
    def __init__(self, env: Env, cfg: HostConfig, health: dict[str, str] | None = None) -> None:
        self.health = health or {}  # the health fact: BDF -> why, of the unusable devices
        self.env = env
        self.host = env.host
        self.cfg = cfg
        self.scan = Scan(env.host)
        self.files = OpenFiles(env.host)
        self.future_vfs: dict[str, list[str]] = {}  # PF -> its VFs once the SR-IOV steps ran

    def where(self, sel: Selector) -> str:
        return f"{self.cfg.source}:{sel.line}"

    def pci(self, sel: Selector, what: str) -> list[str]:
        """The physical functions ``sel`` names; a name that is not there is NotFound, a match may be empty."""
        if sel.device is not None:
            t = self.resolve(sel)
            assert t.bdf is not None
            return [t.bdf]
        assert sel.match is not None
        return [d.bdf for d in self.scan.physical() if matches(d, sel.match)]

    def resolve(self, sel: Selector) -> naming.ResolvedName:
        """A device named in the document; errors say where in the document."""
        assert sel.device is not None
        try:
            return naming.resolve(self.host, sel.device, scan=self.scan)
        except VgpukitError as err:
            raise type(err)(f"{self.where(sel)}: {err.message}", device=err.device, hint=err.hint) from None

    def unique(self, area: str, pairs: list[tuple[str, Selector]]) -> None:
        seen: dict[str, Selector] = {}
        for key, sel in pairs:
            if key in seen:
                lines = f"{seen[key].line} and {sel.line}"
                raise InvalidInput(f"{self.cfg.source}: {area}: {key} is selected by the entries at lines {lines}")
            seen[key] = sel


def plan(env: Env, cfg: HostConfig, mig: MigPlanner | None, health: dict[str, str] | None = None) -> Plan:
    """The steps that make the host match ``cfg``; raises (nothing changed) when it cannot.
    ``health``: BDF -> why, of the devices the health layer finds unusable (SR-IOV is refused there)."""
    try:
        return _plan(_Ctx(env, cfg, health), mig)
    except InUse:
        raise
    except Busy as err:
        if err.kind == "unusable":  # the health rule's refusal (docs/health.md) keeps its own kind
            raise  # planners raise Busy for devices in use; the lock is taken before planning
        raise InUse(err.message, path=err.path, device=err.device, value=err.value, hint=err.hint) from err


def _plan(ctx: _Ctx, mig: MigPlanner | None) -> Plan:
    out = Plan()
    sriov = _sriov(ctx)
    bind = _vfio(ctx)
    mdev_rm, mdev_add = _mdev(ctx)
    vgpu_rm, vgpu_add = _vgpu(ctx)
    mig_steps = mig(ctx.cfg.mig) if ctx.cfg.mig is not None and mig is not None else []
    out.add("mdev", mdev_rm)
    out.add("vgpu", vgpu_rm)
    out.add("sriov", sriov)
    out.add("bind", bind)
    out.add("mig", mig_steps)
    out.add("mdev", mdev_add)
    out.add("vgpu", vgpu_add)
    out.add("qos", _qos(ctx))
    return out


def _sriov(ctx: _Ctx) -> list[Step]:
    pairs = [(bdf, w) for w in ctx.cfg.sriov for bdf in ctx.pci(w.sel, "SR-IOV PF")]
    ctx.unique("sriov", [(b, w.sel) for b, w in pairs])
    steps: list[Step] = []
    for bdf, w in pairs:
        pf = read_pf(ctx.host, bdf, ctx.files, name=w.sel.describe(), scan=ctx.scan)
        if w.vfs == 0:
            steps += ops.plan_disable(ctx.host, pf, force=False)
        else:
            steps += ops.plan_enable(ctx.host, pf, w.vfs, w.driver, False, False, 10.0, ctx.health.get(bdf))
        if w.vfs != pf.num_vfs:
            off, stride = pf.offset or 1, pf.stride or 1
            ctx.future_vfs[bdf] = [vf_address(bdf, off, stride, n) for n in range(w.vfs)]
    return steps


def _vfio(ctx: _Ctx) -> list[Step]:
    pairs = [(bdf, sel) for sel in ctx.cfg.vfio for bdf in ctx.pci(sel, "device")]
    ctx.unique("vfio", pairs)
    steps: list[Step] = []
    for bdf, _sel in pairs:
        cur = binding.current_driver(ctx.host, bdf)
        if cur == binding.VFIO:
            continue
        binding.require_driver(ctx.host, binding.VFIO)
        dev = ctx.scan.device(bdf)
        users = pci_users(ctx.host, bdf, dev.iommu_group, ctx.files)
        if users:
            raise InUse(
                f"binding {bdf} to vfio-pci would take it from {cur}: it is in use "
                f"({'; '.join(u.describe() for u in users)})",
                device=bdf,
                hint="stop its users first; nothing was changed",
            )
        steps.append(BindDriver(bdf, binding.VFIO, note=f"{bdf} (now on {cur or 'no driver'})"))
    return steps


# ----------------------------------------------------------------------------- mdev
def _parents(ctx: _Ctx, sel: Selector, names: list[str]) -> list[str]:
    if sel.device is not None:
        if sel.device in names:
            return [sel.device]
        t = ctx.resolve(sel)
        if t.bdf in names:
            return [t.bdf]
        raise NotFound(f"{ctx.where(sel)}: {sel.device} is not an mdev parent", device=t.bdf)
    assert sel.match is not None
    out = []
    for name in names:
        if ctx.scan.exists(name):
            if matches(ctx.scan.device(name), sel.match):
                out.append(name)
        elif sel.match.lower() in name.lower():
            out.append(name)
    return out


def _keep(
    have: list[MdevInstance], pinned: tuple[str, ...], count: int, taken: set[str]
) -> tuple[list[MdevInstance], list[str]]:
    """Which instances stay (pinned, then in use, then by UUID) and which pinned UUIDs are missing.
    ``taken``: every UUID the config pins on these parents (one pinned as another type is not kept)."""
    mine = {i.uuid: i for i in have}
    kept = [mine[u] for u in pinned if u in mine]
    rest = sorted((i for i in have if i.uuid not in taken), key=lambda i: (not i.in_use, i.uuid))
    kept += rest[: max(0, count - len(pinned))]
    return kept, [u for u in pinned if u not in mine]


def _converge_parent(
    ctx: _Ctx, parents: list[str], wants: dict[str, tuple[int, tuple[str, ...]]], active: list[MdevInstance]
) -> tuple[list[Step], list[Step]]:
    """Exactly ``wants[type] = (count, pinned uuids)`` instances on ``parents`` (other types removed)."""
    on = [i for i in active if i.parent in parents]
    elsewhere = {i.uuid: i for i in active if i.parent not in parents}
    removals: list[Step] = []
    adds: list[Step] = []
    gone: list[MdevInstance] = []
    todo: list[tuple[str, list[str]]] = []
    taken = {u for _, pinned in wants.values() for u in pinned}
    for type_id, (count, pinned) in wants.items():
        for u in pinned:
            if u in elsewhere:
                raise Conflict(f"mdev {u} exists already on {elsewhere[u].parent}", value=u)
        have = [i for i in on if i.type_id == type_id]
        kept, missing = _keep(have, pinned, count, taken)
        gone += [i for i in have if i not in kept]
        todo.append((type_id, missing + [new_uuid() for _ in range(count - len(kept) - len(missing))]))
    gone += [i for i in on if i.type_id not in wants]
    objs = [mdev_sysfs.read_parent(ctx.host, p) for p in parents] if any(u for _, u in todo) else []
    for type_id, uuids in todo:
        if not uuids:
            continue
        # removals free capacity the kernel shares between types in ways only it knows: a parent losing
        # instances is not checked here (each creation checks, and a failure rolls the whole run back)
        freeing = {i.parent for i in gone}
        cands = [(p, 1 << 20 if p in freeing else a) for p, a in candidates(objs, type_id)]
        slots = [s.parent for s in place(cands, type_id, len(uuids)) for _ in range(s.count)]
        adds += [CreateMdev(p, type_id, u, check_capacity=True) for p, u in zip(slots, uuids, strict=True)]
    busy = [i for i in gone if i.in_use]
    if busy:
        who = ", ".join(h.describe() for h in busy[0].holders)
        raise InUse(
            f"the config would remove mdev {busy[0].uuid} ({busy[0].type_id} on {busy[0].parent}), in use by {who}",
            value=busy[0].uuid,
            hint="stop or detach the VM first; nothing was changed",
        )
    removals += [RemoveMdev(i.uuid, i.parent, i.type_id) for i in sorted(gone, key=lambda i: i.uuid)]
    return removals, adds


def _mdev(ctx: _Ctx) -> tuple[list[Step], list[Step]]:
    if not ctx.cfg.mdev:
        return [], []
    names = mdev_sysfs.parent_names(ctx.host)
    groups: dict[str, dict[str, tuple[int, tuple[str, ...]]]] = {}
    seen: list[tuple[str, Selector]] = []
    for w in ctx.cfg.mdev:
        for p in _parents(ctx, w.sel, names):
            seen.append((f"{p} {w.type}", w.sel))
            groups.setdefault(p, {})[w.type] = (w.count, w.uuids)
    ctx.unique("mdev", seen)
    active = mdev_sysfs.instances(ctx.host)
    rm: list[Step] = []
    add: list[Step] = []
    for parent, wants in groups.items():
        r, a = _converge_parent(ctx, [parent], wants, active)
        rm += r
        add += a
    return rm, add


# ----------------------------------------------------------------------------- vGPU
def _gpu_of(ctx: _Ctx, views: dict[str, GpuView], sel: Selector) -> list[str]:
    bdfs = ctx.pci(sel, "GPU")
    if sel.device is not None and bdfs[0] not in views:
        raise Unsupported(f"{ctx.where(sel)}: {sel.device} is not an NVIDIA GPU", device=bdfs[0])
    return [b for b in bdfs if b in views]


def _vgpu(ctx: _Ctx) -> tuple[list[Step], list[Step]]:
    if not ctx.cfg.vgpu:
        return [], []
    views = {g.bdf: g for g in hostview.gpus(ctx.host, ctx.scan)}
    groups: dict[str, list[VgpuWant]] = {}
    seen: list[tuple[str, Selector]] = []
    for w in ctx.cfg.vgpu:
        for bdf in _gpu_of(ctx, views, w.sel):
            groups.setdefault(bdf, []).append(w)
            seen.append((f"{bdf} {short_name(w.type)}", w.sel))
    ctx.unique("vgpu", seen)
    rm: list[Step] = []
    add: list[Step] = []
    for bdf, wants in groups.items():
        gpu = views[bdf]
        if gpu.interface == MDEV and bdf not in ctx.future_vfs:
            types = hostview.types(ctx.host, gpu)
            want: dict[str, tuple[int, tuple[str, ...]]] = {
                find_type(types, gpu, w.type).type_id: (w.count, ()) for w in wants
            }
            r, a = _converge_parent(ctx, list(gpu.parents), want, mdev_sysfs.instances(ctx.host))
        else:
            r, a = _vgpu_vfs(ctx, gpu, wants)
        rm += r
        add += a
    return rm, add


def _vgpu_vfs(ctx: _Ctx, gpu: GpuView, wants: list[VgpuWant]) -> tuple[list[Step], list[Step]]:
    """vGPUs on VFs (vendor VFIO): each VF carries one type; VFs the SR-IOV steps create count too."""
    vfs = ctx.future_vfs.get(gpu.bdf)
    fresh = vfs is not None
    if vfs is None:
        if gpu.interface is None:
            raise Unsupported(
                f"{gpu.alias or gpu.bdf} ({gpu.name}) offers no vGPU types",
                device=gpu.bdf,
                hint="is the vGPU host driver loaded, and are its VFs enabled (sriov section)?",
            )
        vfs = list(gpu.vfs)
    cat = for_device(ctx.scan.device(gpu.bdf).ids)
    want: dict[str, tuple[int, str]] = {}
    for w in wants:
        spec = cat.by_name(w.type) if cat else None
        if spec is None and cat and w.type.isdigit():
            spec = cat.by_id(int(w.type))
        if spec is not None and cat is not None:
            want[str(spec.id)] = (w.count, cat.full_name(spec))
        else:
            t = find_type(hostview.types(ctx.host, gpu), gpu, w.type)
            want[t.type_id] = (w.count, t.name)
    cur = {v: ("0" if fresh else str(hostview.current_type(ctx.host, v))) for v in vfs}
    clear: list[str] = []
    for tid in {t for t in cur.values() if t != "0"}:
        have = [v for v in vfs if cur[v] == tid]
        clear += have[want.get(tid, (0, ""))[0] :]
    _refuse_held(ctx, clear)
    free = [v for v in vfs if cur[v] == "0" or v in clear]
    sets: list[Step] = []
    for tid, (count, name) in want.items():
        need = count - sum(1 for v in vfs if cur[v] == tid and v not in clear)
        if need > len(free):
            raise InvalidInput(
                f"{gpu.alias or gpu.bdf}: {count} x {short_name(name)} need {need} more free VFs, "
                f"{len(free)} would be free",
                device=gpu.bdf,
            )
        sets += [SetVgpuType(v, tid, name, check_creatable=True) for v in free[: max(0, need)]]
        free = free[max(0, need) :]
    return [SetVgpuType(v, "0") for v in clear], sets


def _refuse_held(ctx: _Ctx, vfs: list[str]) -> None:
    groups = {v: ctx.scan.device(v).iommu_group for v in vfs}
    held = group_holders(ctx.host, {g for g in groups.values() if g is not None})
    for v, g in groups.items():
        users = held.get(g, []) if g is not None else []
        if users:
            raise InUse(
                f"the config would clear the vGPU of {v}, in use by {', '.join(h.describe() for h in users)}",
                device=v,
                hint="stop or detach the VM first; nothing was changed",
            )


# ----------------------------------------------------------------------------- QoS
def _qos(ctx: _Ctx) -> list[Step]:
    if ctx.cfg.qos is None:
        return []
    import yaml

    from ..qos.config import default_config_path, load_base
    from ..qos.model import QosConfig

    try:
        want = QosConfig.from_dict(ctx.cfg.qos)
    except VgpukitError as err:
        raise InvalidInput(f"{ctx.cfg.source}: config {ctx.cfg.name}: qos: {err}") from None
    path = default_config_path(ctx.host)
    if load_base(ctx.host, path).to_dict() == want.to_dict():
        return []
    text = yaml.safe_dump(want.to_dict(), sort_keys=False)
    shown = ctx.host.display(path)
    return [PutFile(shown, text, 0o644, what=f"write the QoS config {shown}")]
