"""The whole difference between a host and a host config, as one list of engine steps.

Every area is planned from the host as it is, by the area's own planners and steps (SR-IOV and
vfio-pci: :mod:`vgpukit.sriov.planner`, the rules of ``sriov enable`` and ``bind``; mdev and vGPU:
:mod:`vgpukit.mdev.planner`, :mod:`vgpukit.vgpu.planner`; MIG: :func:`vgpukit.mig.migparted.plan_config`);
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
from typing import Any, TypeVar

from .. import naming
from ..engine import Env, Step
from ..engine.step import STAGES
from ..errors import Busy, DeviceUnusable, InUse, InvalidInput, Unsupported, VgpukitError
from ..exclusion import Exclusions, skipped_doc
from ..holders import OpenFiles
from ..inputs import where_in
from ..mdev import converge as mdev_converge
from ..mdev import planner as mdev_planner
from ..mdev import sysfs as mdev_sysfs
from ..pci import PciDevice, Scan, vf_address
from ..sriov import planner
from ..vgpu import hostview
from ..vgpu import planner as vgpu_planner
from ..vgpu.catalog import short_name
from ..vgpu.model import MDEV, GpuView
from ..yaml_keys import SAFE_KEY, json_path
from .document import HostConfig, Selector, VgpuWant

AREAS = ("sriov", "bind", "mdev", "vgpu", "mig", "qos", "remediation")
IDS_RE = re.compile(r"([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\Z")
FORCE_KEY = "set force: true on the vfio entry"  # how a host config overrides what --force overrides
T = TypeVar("T")
_NAMED = re.compile(r":[0-9]+(:[0-9]+)?: config ")  # FILE:LINE[:COLUMN]: config NAME: ...


@dataclass
class Plan:
    steps: list[tuple[str, Step]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the MIG and QoS planners', about this host
    skipped: list[tuple[str, str, DeviceUnusable]] = field(default_factory=list)  # (area, device, refusal)
    unmet: list[str] = field(default_factory=list)  # what the config has that apply cannot make (QoS planner's)

    def add(self, area: str, steps: list[Step]) -> None:
        self.steps += [(area, s) for s in steps]

    @property
    def ordered(self) -> list[tuple[str, Step]]:
        """(area, step) in the order the executor runs them (call-outs' ``pre`` first, ``post`` last)."""
        return [(a, s) for stage in STAGES for a, s in self.steps if s.stage == stage]

    @property
    def plain(self) -> list[Step]:
        return [s for _, s in self.ordered]

    def to_json(self) -> dict[str, Any]:
        counts = dict.fromkeys(AREAS, 0)
        for area, _ in self.steps:
            counts[area] += 1
        return {
            "plan": [s.describe() for s in self.plain],
            "steps": [{"area": a, **s.to_dict()} for a, s in self.ordered],
            "areas": counts,
            "skipped": [skipped_doc(area, device, err) for area, device, err in self.skipped],
        }


def matches(dev: PciDevice, pattern: str) -> bool:
    """``vendor:device`` (hex) or a case-insensitive part of the model name."""
    m = IDS_RE.match(pattern)
    if m:
        return dev.ids == f"{m.group(1)}:{m.group(2)}".lower()
    return pattern.lower() in dev.name.lower()


class _Ctx:
    def __init__(self, env: Env, cfg: HostConfig) -> None:
        self.env = env
        self.host = env.host
        self.cfg = cfg
        self.scan = Scan(env.host)
        self.files = OpenFiles(env.host)
        self.facts = planner.Facts(env.host, self.scan, self.files, nvml=lambda: env.nvml)
        self.exclusions = Exclusions(env.host, lambda: env.nvml, self.scan)  # read once, when first asked
        self.skipped: list[tuple[str, str, DeviceUnusable]] = []
        self.future_vfs: dict[str, list[str]] = {}  # PF -> its VFs once the SR-IOV steps ran
        self._mdev: mdev_planner.Facts | None = None
        self.path: tuple[Any, ...] = ()  # the entry being planned (under the config): an error without a place
        self.mig_after: dict[str, bool] = {}  # GPU -> its MIG mode once the plan's MIG steps ran

    def mdev_facts(self) -> mdev_planner.Facts:
        """The mdev planner's facts of this host (read once per plan)."""
        if self._mdev is None:
            self._mdev = mdev_planner.read(self.host)  # with definitions: apply's removals take theirs
        return self._mdev

    def located(self, sel: Selector, make: Callable[[], T]) -> T:
        """``make()``; a refusal names where in the document the value it is about is: the place the
        planner noted (:func:`vgpukit.inputs.at`), else the entry's value the refusal names, else the entry."""
        try:
            return make()
        except VgpukitError as err:
            key = sel.key_of(err.value) if err.value is not None and not where_in(err) else None
            where = self.where(sel, *(where_in(err) or ((key,) if key else ())))
            raise type(err)(f"{where}: {err.message}", device=err.device, value=err.value, hint=err.hint) from None

    def where(self, sel: Selector, *at: Any) -> str:
        """``FILE:LINE:COLUMN: config NAME`` of the value at ``at`` in ``sel``'s entry (the entry itself)."""
        found = self.cfg.places.locate((*sel.path, *at))
        place = f"{self.cfg.source}:{found[0]}:{found[1]}" if found else f"{self.cfg.source}:{sel.line}"
        return f"{place}: config {self.cfg.name}"

    def at(self, sel: Selector) -> Selector:
        """Plan ``sel``'s entry now: errors the area's planner raises name its place."""
        self.path = sel.path[len(self.cfg.path) :]
        return sel

    def plan_entry(self, sel: Selector, req: planner.Request) -> list[Step]:
        """The area planner's steps for one entry; a refusal names the entry's place in the file."""
        return self.located(sel, lambda: planner.plan(self.facts, req))

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
            where = self.where(sel, sel.key_of(sel.device) or "device")
            raise type(err)(f"{where}: {err.message}", device=err.device, hint=err.hint) from None

    def excluded(self, area: str, sel: Selector, bdf: str, name: str | None = None) -> bool:
        """Whether the plan leaves device ``bdf`` (an entry's) alone, and why: the one predicate of
        the config doors (:class:`vgpukit.exclusion.Exclusions`: the health layer finds it unusable).
        A device left alone is recorded with its refusal, located at its entry; the rest is planned."""
        label = name or naming.aliases(self.scan).get(bdf, bdf)
        err = self.exclusions.check(bdf, f"{label} ({bdf})" if label != bdf else bdf)
        if err is None:
            return False
        where = f"{self.where(sel)}: "
        self.skipped.append((area, label, DeviceUnusable(where + err.message, device=bdf, hint=err.hint)))
        return True

    def unique(self, area: str, pairs: list[tuple[str, Selector]]) -> None:
        seen: dict[str, Selector] = {}
        for key, sel in pairs:
            if key in seen:
                lines = f"{seen[key].line} and {sel.line}"
                where = self.where(sel, "device" if sel.device is not None else "match")
                raise InvalidInput(f"{where}: {area}: {key} is selected by the entries at lines {lines}")
            seen[key] = sel


def plan(env: Env, cfg: HostConfig) -> Plan:
    """The steps that make the host match ``cfg``; raises (nothing changed) when it cannot. Every error
    names the file, the line of the entry it is about (else of the config) and the config."""
    ctx = _Ctx(env, cfg)
    try:
        return _plan(ctx)
    except VgpukitError as err:
        if not err.message.startswith(f"{cfg.source}:"):  # an area planner's own words: say where
            err.message = f"{cfg.place(*ctx.path, *where_in(err))}: config {cfg.name}: {err.message}"
        elif not _NAMED.match(err.message[len(cfg.source) :]):  # placed by the area (MIG): name the config
            at, _, rest = err.message[len(cfg.source) :].partition(" ")
            err.message = f"{cfg.source}{at} config {cfg.name}: {rest}"
        err.args = (err.message,)
        # planners raise Busy for devices in use; the health rule's refusal keeps its own kind (docs/health.md)
        if isinstance(err, Busy) and not isinstance(err, InUse | DeviceUnusable):
            raise InUse(err.message, path=err.path, device=err.device, value=err.value, hint=err.hint) from err
        raise


def _plan(ctx: _Ctx) -> Plan:
    out = Plan()
    sriov = _sriov(ctx)
    bind = _vfio(ctx)
    mdev_rm, mdev_add = _mdev(ctx)
    vgpu_rm, vgpu_add = _vgpu(ctx)
    mig_steps = _mig(ctx, out)
    out.add("mdev", mdev_rm)
    out.add("vgpu", vgpu_rm)
    out.add("sriov", sriov)
    out.add("bind", bind)
    out.add("mig", mig_steps)
    out.add("mdev", mdev_add)
    out.add("vgpu", vgpu_add)
    out.add("qos", _qos(ctx, out))
    out.add("remediation", _remediation(ctx))
    out.skipped = ctx.skipped
    return out


def _mig(ctx: _Ctx, out: Plan) -> list[Step]:
    """The selected mig-configs config, by the MIG config planner (loaded only when there is one)."""
    if ctx.cfg.mig is None:
        return []
    ctx.path = ("mig",)
    from ..mig import migparted
    from ..mig.steps import SetMode, nvml_of

    req = migparted.MigRequest(ctx.cfg.mig, ctx.cfg.source, ctx.cfg.mig_name, strict=ctx.cfg.strict)
    found = migparted.plan_config(nvml_of(ctx.env), ctx.scan, req, ctx.exclusions)
    out.warnings += found.warnings
    ctx.mig_after = {s.bdf: s.enable for p in found.plans for s in p.steps if isinstance(s, SetMode)}
    names = naming.aliases(ctx.scan)
    where = f"{ctx.cfg.place('mig')}: config {ctx.cfg.name}"
    for err in found.skipped:  # the GPUs the MIG planner left alone, the rest planned
        bdf = err.device or ""
        located = DeviceUnusable(f"{where}: {err.message}", device=bdf, hint=err.hint)
        ctx.skipped.append(("mig", names.get(bdf, bdf), located))
    return list(found.steps)


def _sriov(ctx: _Ctx) -> list[Step]:
    pairs = [(bdf, w) for w in ctx.cfg.sriov for bdf in ctx.pci(w.sel, "SR-IOV PF")]
    ctx.unique("sriov", [(b, w.sel) for b, w in pairs])
    steps: list[Step] = []
    for bdf, w in pairs:
        ctx.at(w.sel)
        if ctx.excluded("sriov", w.sel, bdf, None):
            continue
        pf = ctx.facts.pf(bdf, name=w.sel.describe())
        req: planner.Request
        if w.vfs == 0:
            req = planner.DisableRequest(bdf, force_how=None)
        else:
            req = planner.EnableRequest(bdf, w.vfs, w.driver, force_how=None)
        steps += ctx.plan_entry(w.sel, req)
        if w.vfs != pf.num_vfs or (w.vfs and pf.missing):  # made anew: what goes on them goes on these
            off, stride = pf.offset or 1, pf.stride or 1
            ctx.future_vfs[bdf] = [vf_address(bdf, off, stride, n) for n in range(w.vfs)]
    return steps


def _vfio(ctx: _Ctx) -> list[Step]:
    wants = [(want, ctx.pci(want.sel, "device")) for want in ctx.cfg.vfio]
    ctx.unique("vfio", [(bdf, want.sel) for want, bdfs in wants for bdf in bdfs])
    steps: list[Step] = []
    for want, bdfs in wants:
        ctx.at(want.sel)
        bdfs = [b for b in bdfs if not ctx.excluded("bind", want.sel, b)]
        if not bdfs:
            continue
        req = planner.VfioRequest(tuple(bdfs), want.sel.match, want.force, FORCE_KEY)
        steps += ctx.plan_entry(want.sel, req)
    return steps


# ----------------------------------------------------------------------------- mdev
def _parents(ctx: _Ctx, sel: Selector, names: list[str]) -> list[str]:
    """The mdev parents ``sel`` names (a name that is none: the mdev planner's "no mdev parent")."""
    if sel.device is not None:
        if sel.device in names:
            return [sel.device]
        if naming.form_of(sel.device) == "word":
            return [sel.device]  # not a device name: the planner says there is no such parent
        t = ctx.resolve(sel)
        return [t.bdf or sel.device]
    assert sel.match is not None
    out = []
    for name in names:
        if ctx.scan.exists(name):
            if matches(ctx.scan.device(name), sel.match):
                out.append(name)
        elif sel.match.lower() in name.lower():
            out.append(name)
    return out


def _mdev(ctx: _Ctx) -> tuple[list[Step], list[Step]]:
    if not ctx.cfg.mdev:
        return [], []
    names = mdev_sysfs.parent_names(ctx.host)
    groups: dict[str, tuple[Selector, mdev_planner.Wants]] = {}
    seen: list[tuple[str, Selector]] = []
    for w in ctx.cfg.mdev:
        for p in _parents(ctx, ctx.at(w.sel), names):
            type_id = mdev_planner.type_named(ctx.mdev_facts().parents, w.type, [p])  # T4-4Q names its id
            seen.append((f"{p} {type_id}", w.sel))
            groups.setdefault(p, (w.sel, {}))[1][type_id] = (w.count, w.uuids)
    ctx.unique("mdev", seen)
    facts = ctx.mdev_facts()
    rm: list[Step] = []
    add: list[Step] = []
    for parent, (sel, wants) in groups.items():
        ctx.at(sel)
        if ctx.scan.exists(parent) and ctx.excluded("mdev", sel, parent):
            continue
        r, a = ctx.located(sel, lambda: mdev_converge.converge(facts, [parent], wants))  # noqa: B023
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
        for bdf in _gpu_of(ctx, views, ctx.at(w.sel)):
            groups.setdefault(bdf, []).append(w)
            seen.append((f"{bdf} {short_name(w.type)}", w.sel))
    ctx.unique("vgpu", seen)
    rm: list[Step] = []
    add: list[Step] = []
    for bdf, wants in groups.items():
        ctx.at(wants[0].sel)
        if ctx.excluded("vgpu", wants[0].sel, bdf):
            continue
        gpu = views[bdf]
        facts = vgpu_planner.read(ctx.host, gpu, ctx.scan.device(bdf).ids)
        pairs = [(w.type, w.count) for w in wants]
        if gpu.interface == MDEV and bdf not in ctx.future_vfs:
            r, a = vgpu_planner.converge_mdev(facts, ctx.mdev_facts(), pairs)
        else:
            r, a = vgpu_planner.converge_vfs(facts, pairs, ctx.future_vfs.get(bdf))
        rm += r
        add += a
    return rm, add


# ----------------------------------------------------------------------------- QoS
def _qos(ctx: _Ctx, out: Plan) -> list[Step]:
    """The ``qos:`` section, by the QoS planner (the rules of ``qos tenant add``, its warnings)."""
    if ctx.cfg.qos is None:
        return []
    from ..qos import planner as qos_planner
    from ..qos.model import QosConfig

    ctx.path = ("qos",)  # the QoS planner notes which value of the section its refusals are about
    try:
        want = QosConfig.from_dict(ctx.cfg.qos)
    except VgpukitError as err:  # what no schema says (a cgroup path, one kind per tenant): the path from the root
        path = ("qos", *where_in(err))
        shown = json_path(
            tuple(p if isinstance(p, int) or SAFE_KEY.match(str(p)) else "?" for p in (*ctx.cfg.path, *path))
        )
        raise InvalidInput(f"{ctx.cfg.place(*path)}: config {ctx.cfg.name}: {shown}: {err}") from None
    try:
        found = qos_planner.plan_config(ctx.host, want, nvml=lambda: ctx.env.nvml, mig=ctx.mig_after)
    except DeviceUnusable as err:  # a new tenant on a quarantined device: the section is left alone, the rest done
        located = f"{ctx.cfg.place('qos')}: config {ctx.cfg.name}: {err.message}"
        name = naming.aliases(ctx.scan).get(err.device or "", err.device or "")
        ctx.skipped.append(("qos", name, DeviceUnusable(located, device=err.device, hint=err.hint)))
        return []
    except VgpukitError as err:  # two keys of one GPU: the error is placed at one, name the other's line
        also = err.__dict__.get("also")
        if also:
            err.message += f" (the other key: {ctx.cfg.place('qos', *also)})"
            err.args = (err.message,)
        raise
    out.warnings += found.warnings
    out.unmet += found.unmet
    return found.steps


# ----------------------------------------------------------------------------- remediation
def _remediation(ctx: _Ctx) -> list[Step]:
    """The ``remediation:`` section: the policy file the runner reads (docs/health.md, "Remediation")."""
    if ctx.cfg.remediation is None:
        return []
    from ..remedy import policy

    try:
        return policy.plan_config(ctx.host, ctx.cfg.remediation)
    except VgpukitError as err:
        raise InvalidInput(f"{ctx.cfg.place('remediation')}: config {ctx.cfg.name}: {err}") from None
