"""The one mdev planner: typed requests in, engine steps (or a typed refusal, raised) out.

Every host rule of mediated devices lives here, for every door (``vgpukit mdev``, the mdevctl shim,
``vgpukit vgpu`` on legacy GPUs, ``vgpukit apply``): unknown parent or type, capacity (placement:
:mod:`vgpukit.mdev.placement`), instances in use, pinned and existing UUIDs, and mdevctl's call-out
scripts, whose ``pre`` / ``post`` steps are part of every plan that changes a device. The planner reads
nothing itself: :func:`read` gathers the :class:`Facts` it plans from. It never executes, prints or
parses command lines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec
from msgspec.structs import replace

from ..engine import Step
from ..errors import Conflict, InUse, InvalidInput, NotFound
from ..exclusion import Exclusions
from ..host import Host
from ..inputs import at
from ..naming import unknown
from . import callouts, mdevctl, sysfs
from .excluded import refuse_excluded
from .model import (
    PACK,
    Definition,
    MdevInstance,
    MdevParent,
    check_parent_name,
    check_type_id,
    check_uuid,
    new_uuid,
)
from .placement import candidates, plan
from .placement import type_named as type_named  # a rule of the planner (kept in placement.py for size)
from .steps import CreateMdev, Refuse, RemoveMdev, SetMdevAttr, callout_steps, drop_definition, put_definition

if TYPE_CHECKING:
    from ..nvml import Nvml

Wants = dict[str, tuple[int, tuple[str, ...]]]  # type -> (count, pinned UUIDs)
BIG = 1 << 20  # "room enough": a parent losing instances in the same plan (the kernel re-checks)


class Facts(msgspec.Struct, frozen=True):
    """What the planner needs to know of the host, read once."""

    parents: tuple[MdevParent, ...]
    instances: tuple[MdevInstance, ...]
    definitions: tuple[Definition, ...] = ()
    files: dict[tuple[str, str], str] = msgspec.field(default_factory=dict)  # (uuid, parent) -> its file
    callouts: bool = False  # whether any call-out or notifier script is installed
    domains: dict[str, tuple[str, ...]] = msgspec.field(
        default_factory=dict
    )  # uuid -> running libvirt domains naming it
    home: str = ""  # mdevctl's definition directory, as the user sees it (read from the host door)
    exclusions: Exclusions | None = None  # the one predicate (quarantine, health), asked when work is placed

    def parent(self, name: str) -> MdevParent:
        """Parent ``name``; the one 'not on this host' refusal (exit 3) otherwise."""
        found = next((p for p in self.parents if p.name == name), None)
        if found is None:
            raise at(unknown("mdev parent", name, hint="see: vgpukit mdev types"), "parent")
        return found

    def instance(self, uid: str) -> MdevInstance | None:
        return next((i for i in self.instances if i.uuid == uid), None)

    def defined(self, uid: str) -> Definition | None:
        return next((d for d in self.definitions if d.uuid == uid), None)

    def path(self, d: Definition) -> str:
        """Where ``d``'s mdevctl file is (its existing one, whatever the case of its name) or goes."""
        return self.files.get((d.uuid, d.parent)) or f"{self.home}/{d.parent}/{d.uuid}"


def read(
    host: Host, definitions: bool = True, uri: str | None = None, nvml: Callable[[], Nvml | None] | None = None
) -> Facts:
    """The facts of ``host`` the planner plans from; with ``uri`` (a libvirt that applies: the system
    one on a real host) also the running domains whose definition names each mdev. ``nvml``: what the
    exclusion predicate asks about a parent's health (read only when work is placed on it)."""
    defs = mdevctl.read_all(host)[0] if definitions else []
    files: dict[tuple[str, str], str] = {}
    for d in defs:
        for p in mdevctl.files_of(host, d.uuid):
            files[(d.uuid, p.parent.name)] = host.display(p)
    doms: dict[str, tuple[str, ...]] = {}
    if uri is not None:
        from .domains import running_users

        doms = {u: tuple(names) for u, names in running_users(uri).items() if names}
    parents, instances = tuple(sysfs.parents(host)), tuple(sysfs.instances(host))
    home = host.display(host.mdevctl_dir())
    return Facts(parents, instances, tuple(defs), files, callouts.installed(host), doms, home, Exclusions(host, nvml))


@dataclass
class MdevPlan:
    """Steps to execute, and what they make (for the front end's report)."""

    steps: list[Step] = field(default_factory=list)
    instances: list[Definition] = field(default_factory=list)
    definitions: list[Definition] = field(default_factory=list)  # definitions written

    def describe(self) -> list[str]:
        from ..engine.executor import staged

        return [s.describe() for s in staged(self.steps)]


# ----------------------------------------------------------------------------- the rules
def type_of(facts: Facts, parent: str, type_id: str) -> None:
    """``type_id`` must be one of ``parent``'s types (parent present)."""
    check_type_id(type_id)
    if facts.parent(parent).type(type_id) is None:
        raise at(
            NotFound(f"parent {parent} has no mdev type {type_id}", device=parent, hint="see: vgpukit mdev types"),
            "type",
        )


def check_type(facts: Facts, parent: str, type_id: str) -> None:
    """As :func:`type_of` when the parent is present; an absent parent only needs a well-formed name
    (a definition for a parent that appears later)."""
    if any(p.name == parent for p in facts.parents):
        type_of(facts, parent, type_id)
    else:
        check_type_id(type_id)
        check_parent_name(parent)


def in_use(inst: MdevInstance, domains: tuple[str, ...] = ()) -> InUse:
    """The one refusal for an mdev in use that a plan would remove: held by a process (its VFIO group
    node or cdev; the command's own callers are not users unless a VM), or named by a running libvirt
    domain (a defined but stopped one does not use it; docs/decisions.md, "In use")."""
    who = ", ".join([h.describe() for h in inst.holders] + [f"domain {name}" for name in domains])
    return InUse(
        f"mdev {inst.uuid} ({inst.type_id} on {inst.parent}) is in use by {who}",
        value=inst.uuid,
        hint="stop or detach the VM first; nothing was changed",
    )


def _callouts(facts: Facts, action: str, devices: list[Definition], force: bool) -> tuple[list[Step], list[Step]]:
    return callout_steps(action, devices, force) if facts.callouts and devices else ([], [])


def wrapped(
    facts: Facts, action: str, devices: list[Definition], change: list[Step], force: bool = False
) -> list[Step]:
    """``change`` with the call-out steps of ``action`` on ``devices`` around it."""
    if not change:
        return []
    pre, post = _callouts(facts, action, devices, force)
    return pre + change + post


# ----------------------------------------------------------------------------- create
class Create(msgspec.Struct, frozen=True):
    """N new instances of one type: on ``parent``, or on parents chosen by ``strategy`` (among
    ``among``, on NUMA node ``numa``); ``uuid`` names the one instance; ``define`` also writes
    definitions (start ``auto`` with ``auto``)."""

    type_id: str
    count: int = 1
    parent: str | None = None
    among: tuple[str, ...] | None = None
    uuid: str | None = None
    strategy: str = PACK
    numa: int | None = None
    define: bool = False
    auto: bool = False


def create(facts: Facts, req: Create) -> MdevPlan:
    among = [req.parent] if req.parent is not None else list(req.among) if req.among is not None else None
    req = replace(req, type_id=type_named(facts.parents, req.type_id, among))
    check_type_id(req.type_id)
    if req.count < 1:
        raise InvalidInput(f"--count must be at least 1, not {req.count}", value=req.count)
    if req.uuid is not None and req.count > 1:
        raise InvalidInput("--uuid names one instance; it cannot be combined with --count > 1")
    if req.auto and not req.define:
        raise InvalidInput("--auto needs --define (it is the start mode of the persistent definition)")
    start = "auto" if req.auto else "manual"
    known = list(facts.parents)
    if req.parent is not None:
        known = [facts.parent(req.parent)]
        type_of(facts, req.parent, req.type_id)
    elif req.among is not None:
        known = [p for p in known if p.name in req.among]
    keep = refuse_excluded(
        facts.exclusions, [p.name for p in known]
    )  # a named excluded parent is refused; a choice skips it
    known = [p for p in known if p.name in keep]
    uid = check_uuid(req.uuid) if req.uuid is not None else None
    out = MdevPlan()
    if uid is not None:
        existing = facts.instance(uid)
        if existing is not None:
            if existing.type_id == req.type_id and req.parent in (None, existing.parent):
                d = Definition(uid, existing.parent, req.type_id, start)
                out.instances.append(d)
                if req.define and facts.defined(uid) != d:  # already there: only the definition
                    out.steps = wrapped(facts, "define", [d], [put_definition(facts.path(d), d)])
                    out.definitions.append(d)
                return out
            raise Conflict(
                f"an mdev with UUID {uid} already exists ({existing.type_id} on {existing.parent})",
                value=uid,
                hint="pick another --uuid or omit it",
            )
        old = facts.defined(uid)
        if old is not None and (old.type_id != req.type_id or (req.parent and old.parent != req.parent)):
            raise Conflict(
                f"UUID {uid} is defined as {old.type_id} on {old.parent}",
                value=uid,
                hint="use 'vgpukit mdev start' for it, or undefine it first",
            )
    slots = plan(candidates(known, req.type_id, req.numa), req.type_id, req.count, req.strategy)
    made = [Definition(uid or new_uuid(), s.parent, req.type_id, start) for s in slots for _ in range(s.count)]
    change: list[Step] = [CreateMdev(d.parent, d.type_id, d.uuid) for d in made]
    if req.define:
        change += [put_definition(facts.path(d), d) for d in made]
        out.definitions = made
    # mdevctl's scripts see a start, then (--define) a define, of each device: pre start, pre define,
    # the change, post define, post start
    pre, post = _callouts(facts, "start", made, False)
    dpre, dpost = _callouts(facts, "define", made, False) if req.define else ([], [])
    out.steps = pre + dpre + change + dpost + post
    out.instances = made
    return out


# ----------------------------------------------------------------------------- remove / stop
def remove(facts: Facts, uids: list[str], force: bool = False) -> MdevPlan:
    """Remove active instances (their definitions stay); every one is checked before any is removed."""
    wanted = list(dict.fromkeys(check_uuid(u) for u in uids))
    active = {i.uuid: i for i in facts.instances}
    missing = [u for u in wanted if u not in active]
    if missing:
        raise NotFound(f"no active mdev {', '.join(missing)}", value=missing[0], hint="see: vgpukit mdev list")
    for u in wanted:
        if active[u].in_use or facts.domains.get(u):
            raise in_use(active[u], facts.domains.get(u, ()))
    devices = [Definition(u, active[u].parent, active[u].type_id) for u in wanted]  # as mdevctl reads sysfs
    change: list[Step] = [RemoveMdev(d.uuid, d.parent, d.type_id) for d in devices]
    return MdevPlan(wrapped(facts, "stop", devices, change, force))


# ----------------------------------------------------------------------------- start (a definition)
@dataclass
class Start:
    """What starting one definition comes to: ``status`` started (with ``plan``), active (nothing to
    do), conflict (the UUID runs as another device) or parent-absent (started when it appears)."""

    status: str
    message: str = ""
    plan: MdevPlan = field(default_factory=MdevPlan)


def start(facts: Facts, d: Definition, force: bool = False) -> Start:
    """Create the instance of one definition and set its attributes; refused (raised) when its type
    is not the parent's or does not fit."""
    active = facts.instance(d.uuid)
    if active is not None:
        if (active.parent, active.type_id) == (d.parent, d.type_id):
            return Start("active")
        return Start("conflict", f"UUID is active as {active.type_id} on {active.parent}")
    if not any(p.name == d.parent for p in facts.parents):
        return Start("parent-absent", "parent not present; started when it appears (udev rule)")
    refuse_excluded(facts.exclusions, [d.parent])
    room = facts.parent(d.parent).type(d.type_id)
    if room is None:
        type_of(facts, d.parent, d.type_id)
    else:
        plan([(d.parent, room.available)], d.type_id, 1)  # the one "do not fit" refusal
    change: list[Step] = [CreateMdev(d.parent, d.type_id, d.uuid, check_capacity=False)]
    change += [SetMdevAttr(d.uuid, attr, value) for attr, value in d.attrs]
    return Start("started", plan=MdevPlan(wrapped(facts, "start", [d], change, force), [d]))


def missing_parent(facts: Facts, parent: str) -> str | None:
    """mdevctl's ``Unable to find parent device 'P'`` (with ``Did you mean 'p'?`` when only the case
    differs), or None when the parent is present."""
    names = sorted(p.name for p in facts.parents)
    if parent in names:
        return None
    msg = f"Unable to find parent device '{parent}'"
    similar = next((n for n in names if n.lower() == parent.lower()), None)
    return f"{msg}. Did you mean '{similar}'?" if similar else msg


def mdevctl_start_refusal(facts: Facts, d: Definition, force: bool = False) -> MdevPlan | None:
    """Under ``--mdevctl``: why mdevctl's ``start`` of ``d`` fails before it writes anything, in its
    words and order (the UUID already running, the parent, the type, the room left), as a plan that
    runs the call-outs around the refusal as mdevctl does (``pre``, then ``post`` with ``failure``);
    None when mdevctl would go on. vgpukit's own commands keep :func:`start`'s answers."""
    why: str | None = None
    running = facts.instance(d.uuid)
    if running is not None:
        if running.parent != d.parent:
            why = "Device exists under different parent"
        elif running.type_id != d.type_id:
            why = "Device exists with different type"
        else:
            why = "Device already exists"
    else:
        why = missing_parent(facts, d.parent)
        room = None if why else facts.parent(d.parent).type(d.type_id)
        if why is None and room is None:
            why = f"Parent {d.parent} does not support mdev type {d.type_id}"
        elif why is None and room is not None and room.available == 0:
            why = f"No available instances of {d.type_id} on {d.parent}"
    if why is None:
        return None
    pre, post = _callouts(facts, "start", [d], force)
    return MdevPlan([*pre, Refuse(why, d.uuid), *post])


# ----------------------------------------------------------------------------- definitions
def one_definition(facts: Facts, uid: str, parent: str | None) -> Definition | None:
    """The one definition of ``uid`` (on ``parent``); refused when several parents define it."""
    want = check_uuid(uid)
    defs = [d for d in facts.definitions if d.uuid == want and parent in (None, d.parent)]
    if len(defs) > 1:
        raise InvalidInput(
            f"{want} is defined on several parents ({', '.join(d.parent for d in defs)})",
            value=uid,
            hint="give --parent",
        )
    return defs[0] if defs else None


def active_one(facts: Facts, uid: str, parent: str | None) -> MdevInstance:
    """The active instance ``define UUID`` makes persistent (``parent``: mdevctl's ``-u U -p P``)."""
    inst = facts.instance(check_uuid(uid))
    if inst is None:
        if parent is not None:
            raise InvalidInput(f"mdev {uid} is not active: give its --type too")
        hint = "to define a new one: vgpukit mdev define --parent P --type T"
        if facts.defined(check_uuid(uid)):
            hint = f"it is defined, not running: its start mode changes with vgpukit mdev modify {uid} --auto|--manual"
        raise NotFound(f"no active mdev {uid}", value=uid, hint=hint)
    return inst


def attributes_wanted(facts: Facts, d: Definition, any_parent: bool = False) -> bool:
    """Whether defining ``d`` takes its attributes from a call-out script (``get``): the UUID runs as
    ``d``'s type (on ``d``'s parent, or with ``any_parent``) and has no definition yet -- mdevctl asks
    whenever the device is active (``define UUID``, ``define -u U -p P -t T``); a failing script
    refuses the define."""
    inst = facts.instance(d.uuid)
    if inst is None or inst.type_id != d.type_id or facts.defined(d.uuid) is not None:
        return False
    return any_parent or inst.parent == d.parent


def put(facts: Facts, d: Definition, force: bool = False, overwrite: bool = True) -> tuple[MdevPlan, Definition]:
    """Write definition ``d`` (new, or a change of an existing one's start mode); ``overwrite=False``
    (``define --jsonfile``) refuses any existing definition of the UUID."""
    old = facts.defined(d.uuid)
    if old is not None and not overwrite:
        raise Conflict(
            f"UUID {d.uuid} is already defined ({old.type_id} on {old.parent}); not overwriting it",
            value=d.uuid,
            hint="undefine it first, or change it with 'vgpukit mdev modify'",
        )
    if old is not None and (old.parent, old.type_id) != (d.parent, d.type_id):
        raise Conflict(
            f"UUID {d.uuid} is already defined as {old.type_id} on {old.parent}",
            value=d.uuid,
            hint="undefine it first",
        )
    if old is not None and old.start == d.start:
        return MdevPlan(), old
    if old is not None:
        d = Definition(d.uuid, d.parent, d.type_id, d.start, old.attrs)
    step = put_definition(facts.path(d), d, "define" if old is None else "change start mode of")
    return MdevPlan(wrapped(facts, "define", [d], [step], force), definitions=[d]), d


def undefine(facts: Facts, uid: str, paths: list[str], parent: str | None, force: bool = False) -> MdevPlan:
    """Delete every definition file of ``uid`` (``paths``: as the host shows them)."""
    if not paths:
        on = f" on {parent}" if parent else ""
        raise NotFound(f"no persistent definition for {uid}{on}", value=uid, hint="see: vgpukit mdev list --defined")
    devices = [d for d in facts.definitions if d.uuid == uid and parent in (None, d.parent)]
    change: list[Step] = [drop_definition(p, uid) for p in paths]
    return MdevPlan(wrapped(facts, "undefine", devices, change, force))
