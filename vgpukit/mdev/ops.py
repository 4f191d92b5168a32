"""Mutating mdev operations: plan, apply, verify, roll back.

Every operation validates its input and computes its plan before the first write; multi-instance
creation is all-or-nothing (a failure half-way removes what this call created).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..engine import Env, Step, execute
from ..errors import Busy, Conflict, InvalidInput, NotFound, VgpukitError
from ..host import Host
from . import callouts, mdevctl, sysfs
from .model import Definition, check_attr_name, check_parent_name, check_type_id, check_uuid, new_uuid
from .placement import PACK, Slot, candidates, plan
from .steps import CreateMdev, RemoveMdev, SetMdevAttr, drop_definition, put_definition

log = logging.getLogger("vgpukit.mdev")


@dataclass
class Created:
    uuid: str
    parent: str
    type_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "parent": self.parent, "type": self.type_id}


@dataclass
class CreateResult:
    plan: list[str] = field(default_factory=list)
    instances: list[Created] = field(default_factory=list)
    definitions: list[str] = field(default_factory=list)  # files written


def _start_of(auto: bool) -> str:
    return "auto" if auto else "manual"


def create(
    env: Env,
    type_id: str,
    *,
    parent: str | None = None,
    count: int = 1,
    uid: str | None = None,
    strategy: str = PACK,
    numa: int | None = None,
    define: bool = False,
    auto: bool = False,
    parents: list[str] | None = None,
) -> CreateResult:
    """Create ``count`` instances of ``type_id`` (on ``parent``, or on parents chosen by ``strategy``).

    ``parents`` restricts automatic placement to those mdev parents (used by ``vgpu create``).
    """
    host = env.host
    check_type_id(type_id)
    if count < 1:
        raise InvalidInput(f"--count must be at least 1, not {count}", value=count)
    if uid is not None and count > 1:
        raise InvalidInput("--uuid names one instance; it cannot be combined with --count > 1")
    if auto and not define:
        raise InvalidInput("--auto needs --define (it is the start mode of the persistent definition)")
    if uid is not None:
        uid = check_uuid(uid)
    known = sysfs.parents(host)
    if parent is not None:
        if parent not in {p.name for p in known}:
            raise NotFound(f"no mdev parent {parent}", device=parent, hint="see: vgpukit mdev types")
        known = [p for p in known if p.name == parent]
    elif parents is not None:
        known = [p for p in known if p.name in parents]
    result = CreateResult()
    if uid is not None:
        existing = sysfs.find_instance(host, uid)
        if existing is not None:
            if existing.type_id == type_id and (parent is None or existing.parent == parent):
                result.instances.append(Created(uid, existing.parent, type_id))
                if define:
                    _define_quietly(env, Definition(uid, existing.parent, type_id, _start_of(auto)), result)
                return result  # already there: nothing to create
            raise Conflict(
                f"an mdev with UUID {uid} already exists ({existing.type_id} on {existing.parent})",
                value=uid,
                hint="pick another --uuid or omit it",
            )
        defined = mdevctl.find(host, uid)
        if defined is not None and (defined.type_id != type_id or (parent and defined.parent != parent)):
            raise Conflict(
                f"UUID {uid} is defined as {defined.type_id} on {defined.parent}",
                value=uid,
                hint="use 'vgpukit mdev start' for it, or undefine it first",
            )
    slots = plan(candidates(known, type_id, numa), type_id, count, strategy)
    todo = [(s.parent, uid or new_uuid()) for s in slots for _ in range(s.count)]
    steps: list[Step] = [CreateMdev(p, type_id, u) for p, u in todo]
    if define:
        for p, u in todo:
            d = Definition(u, p, type_id, _start_of(auto))
            steps.append(put_definition(mdevctl.path_of(host, d), d))
    result.plan = [s.describe() for s in steps]
    result.instances = [Created(u, p, type_id) for p, u in todo]
    devices = [Definition(u, p, type_id, _start_of(auto)) for p, u in todo]

    def body() -> object:  # mdevctl's scripts see a start, then (--define) a define, of each device
        if define:
            return callouts.guarded(env, "define", devices, lambda: execute(env, steps))
        return execute(env, steps)

    callouts.guarded(env, "start", devices, body)
    if define and not host.dry_run:
        result.definitions = [mdevctl.path_of(host, Definition(u, p, type_id)) for p, u in todo]
    return result


def _define_quietly(env: Env, d: Definition, result: CreateResult) -> None:
    if mdevctl.find(env.host, d.uuid) != d:
        step = put_definition(mdevctl.path_of(env.host, d), d)
        result.plan.append(step.describe())
        callouts.guarded(env, "define", [d], lambda: execute(env, [step]))
        if not env.host.dry_run:
            result.definitions.append(mdevctl.path_of(env.host, d))


def remove(env: Env, uids: list[str], running: dict[str, list[str]] | None = None) -> list[str]:
    """Remove active instances (their definitions stay). All are checked before the first removal.
    ``running``: UUID -> the running libvirt domains whose definition names it (they use it too)."""
    host = env.host
    wanted = list(dict.fromkeys(check_uuid(u) for u in uids))
    active = {i.uuid: i for i in sysfs.instances(host)}
    missing = [u for u in wanted if u not in active]
    if missing:
        raise NotFound(f"no active mdev {', '.join(missing)}", value=missing[0], hint="see: vgpukit mdev list")
    for u in wanted:
        inst = active[u]
        doms = [f"domain {name}" for name in (running or {}).get(u, [])]
        if inst.in_use or doms:
            users = ", ".join([h.describe() for h in inst.holders] + doms)
            raise Busy(
                f"mdev {u} is in use by {users}", value=u, hint="stop or detach the VM first; nothing was removed"
            )
    steps: list[Step] = [RemoveMdev(u, active[u].parent, active[u].type_id) for u in wanted]
    devices = [Definition(u, active[u].parent, active[u].type_id) for u in wanted]  # as mdevctl reads sysfs
    callouts.guarded(env, "stop", devices, lambda: execute(env, steps))
    return [s.describe() for s in steps]


def define_active(env: Env, uid: str, auto: bool, parent: str | None = None) -> tuple[list[str], Definition]:
    """Make an active instance persistent (or change its start mode); with ``parent``, define it on
    that parent with the instance's type (mdevctl's ``define -u U -p P``). A call-out script that
    handles the type supplies its attributes (``get`` event)."""
    host = env.host
    uid = check_uuid(uid)
    inst = sysfs.find_instance(host, uid)
    if inst is None:
        if parent is not None:
            raise InvalidInput(f"mdev {uid} is not active: give its --type too")
        raise NotFound(
            f"no active mdev {uid}", value=uid, hint="to define a new one: vgpukit mdev define --parent P --type T"
        )
    d = Definition(uid, parent or inst.parent, inst.type_id, _start_of(auto))
    if mdevctl.find(host, uid) is None:
        attrs = callouts.get_attributes(host, Definition(uid, inst.parent, inst.type_id), strict=True)
        d = Definition(d.uuid, d.parent, d.type_id, d.start, tuple(attrs or ()))
    return _put(env, d)


def define_new(env: Env, parent: str, type_id: str, uid: str | None, auto: bool) -> tuple[list[str], Definition]:
    uid = check_uuid(uid) if uid else new_uuid()
    check_type(env.host, parent, type_id)
    return _put(env, _with_running_attributes(env.host, Definition(uid, parent, type_id, _start_of(auto))))


def _with_running_attributes(host: Host, d: Definition) -> Definition:
    """``d`` with the attributes a call-out script reports (``get``) when the UUID runs as ``d``'s
    parent and type and has no definition yet: as ``define UUID``, mdevctl asks for them whenever
    the device is active; a failing script refuses the define."""
    inst = sysfs.find_instance(host, d.uuid)
    if inst is None or (inst.parent, inst.type_id) != (d.parent, d.type_id) or mdevctl.find(host, d.uuid):
        return d
    attrs = callouts.get_attributes(host, Definition(d.uuid, d.parent, d.type_id), strict=True)
    return Definition(d.uuid, d.parent, d.type_id, d.start, tuple(attrs or ()))


def define_from_json(env: Env, parent: str, uid: str | None, text: str, where: str) -> tuple[list[str], Definition]:
    """``define --jsonfile``: type, start mode and attributes from a file in mdevctl's format; an
    existing definition of the UUID is never overwritten."""
    d = mdevctl.parse(parent, check_uuid(uid) if uid else new_uuid(), text, where=where)
    check_type(env.host, parent, d.type_id)
    old = mdevctl.find(env.host, d.uuid)
    if old is not None:
        raise Conflict(
            f"UUID {d.uuid} is already defined ({old.type_id} on {old.parent}); not overwriting it",
            value=d.uuid,
            hint="undefine it first, or change it with 'vgpukit mdev modify'",
        )
    return _put(env, d)


def check_type(host: Host, parent: str, type_id: str) -> None:
    """``type_id`` must be one of ``parent``'s types when the parent is present (else only well-formed)."""
    check_type_id(type_id)
    if host.exists(host.mdev_parent(parent)):
        if sysfs.read_parent(host, parent).type(type_id) is None:
            raise NotFound(f"parent {parent} has no mdev type {type_id}", device=parent, hint="see: vgpukit mdev types")
    else:
        check_parent_name(parent)


def _put(env: Env, d: Definition) -> tuple[list[str], Definition]:
    host = env.host
    old = mdevctl.find(host, d.uuid)
    if old is not None and (old.parent, old.type_id) != (d.parent, d.type_id):
        raise Conflict(
            f"UUID {d.uuid} is already defined as {old.type_id} on {old.parent}",
            value=d.uuid,
            hint="undefine it first",
        )
    if old is not None and old.start == d.start:
        return [], old
    if old is not None:
        d = Definition(d.uuid, d.parent, d.type_id, d.start, old.attrs)
    step = put_definition(mdevctl.path_of(host, d), d, "define" if old is None else "change start mode of")
    callouts.guarded(env, "define", [d], lambda: execute(env, [step]))
    return [step.describe()], d


def undefine(env: Env, uid: str, parent: str | None = None) -> list[str]:
    """Delete every definition file of ``uid`` (on ``parent`` only, when given; whatever the case of
    its name; a bad file too)."""
    host = env.host
    uid = check_uuid(uid)
    paths = [p for p in mdevctl.files_of(host, uid) if parent in (None, p.parent.name)]
    if not paths:
        on = f" on {parent}" if parent else ""
        raise NotFound(f"no persistent definition for {uid}{on}", value=uid, hint="see: vgpukit mdev list --defined")
    steps: list[Step] = [drop_definition(host.display(p), uid) for p in paths]
    devices = mdevctl.matching(host, uid, parent)
    callouts.guarded(env, "undefine", devices, lambda: execute(env, steps))
    return [s.describe() for s in steps]


@dataclass
class StartOutcome:
    uuid: str
    parent: str
    type_id: str
    status: str  # started | active | parent-absent | conflict | failed | would-start
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "parent": self.parent,
            "type": self.type_id,
            "status": self.status,
            "message": self.message,
        }

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "conflict")


def start(env: Env, d: Definition) -> StartOutcome:
    """Create the instance of one definition (and set its attrs) unless it is already active.

    Each definition is its own change: a failure (or a failing attribute) leaves no instance behind.
    """
    host = env.host
    out = StartOutcome(d.uuid, d.parent, d.type_id, "started")
    active = sysfs.find_instance(host, d.uuid)
    if active is not None:
        if (active.parent, active.type_id) == (d.parent, d.type_id):
            out.status = "active"
        else:
            out.status, out.message = "conflict", f"UUID is active as {active.type_id} on {active.parent}"
        return out
    if not host.exists(host.mdev_parent(d.parent)):
        out.status, out.message = "parent-absent", "parent not present; started when it appears (udev rule)"
        return out
    if host.dry_run:
        out.status = "would-start"
        return out
    steps: list[Step] = [CreateMdev(d.parent, d.type_id, d.uuid, check_capacity=False)]
    steps += [SetMdevAttr(d.uuid, attr, value) for attr, value in d.attrs]
    try:
        callouts.guarded(env, "start", [d], lambda: execute(env, steps))
    except VgpukitError as err:
        out.status, out.message = "failed", str(err)
    return out


def start_transient(env: Env, d: Definition) -> StartOutcome:
    """Start a device that has no definition (mdevctl's ``start -p P -t T`` / ``--jsonfile``)."""
    if not env.host.exists(env.host.mdev_parent(d.parent)):
        raise NotFound(f"no mdev parent {d.parent}", device=d.parent, hint="see: vgpukit mdev types")
    check_type(env.host, d.parent, d.type_id)
    return start(env, d)


def find_one(host: Host, uid: str, parent: str | None) -> Definition | None:
    """The one definition of ``uid`` (on ``parent``); refused when several parents define it."""
    defs = mdevctl.matching(host, uid, parent)
    if len(defs) > 1:
        raise InvalidInput(
            f"{check_uuid(uid)} is defined on several parents ({', '.join(d.parent for d in defs)})",
            value=uid,
            hint="give --parent",
        )
    return defs[0] if defs else None


def start_all(env: Env, parent: str | None = None) -> list[StartOutcome]:
    """Start every ``auto`` definition (on ``parent`` only, when given): what the boot service runs."""
    defs, bad = mdevctl.read_all(env.host)
    for b in bad:
        log.warning("skipping %s: %s", b.path, b.reason)
    return [start(env, d) for d in defs if d.auto and (parent is None or d.parent == parent)]


def start_one(env: Env, uid: str) -> StartOutcome:
    uid = check_uuid(uid)
    d = mdevctl.find(env.host, uid)
    bad = mdevctl.bad_file_of(env.host, uid) if d is None else None
    if bad is not None:
        raise InvalidInput(
            f"the definition {bad.path} is not valid: {bad.reason}", value=uid, hint="fix or undefine it"
        )
    if d is None:
        raise NotFound(f"no persistent definition for {uid}", value=uid, hint="see: vgpukit mdev list --defined")
    return start(env, d)


def slots_text(slots: list[Slot]) -> str:
    return ", ".join(f"{s.count} on {s.parent}" for s in slots)


@dataclass(frozen=True)
class Modification:
    """What ``modify`` changes in a definition (mdevctl 1.2's ``modify`` options)."""

    type_id: str | None = None
    start: str | None = None  # auto | manual | None (unchanged)
    addattr: str | None = None
    value: str | None = None
    delattr: bool = False
    index: int | None = None


def modify(env: Env, uid: str, parent: str | None, m: Modification) -> tuple[list[str], Definition]:
    """Change a definition (type, start mode, one attribute added or deleted); an active instance is
    left as it is (the change applies at its next start)."""
    host = env.host
    d = find_one(host, uid, parent)
    if d is None:
        on = f" on {parent}" if parent else ""
        raise NotFound(f"mdev {check_uuid(uid)} is not defined{on}", value=uid, hint="see: vgpukit mdev list --defined")
    if m.addattr is not None and m.delattr:
        raise InvalidInput("--addattr and --delattr exclude each other")
    attrs = list(d.attrs)
    n = len(attrs)
    if m.addattr is not None:
        if m.value is None:
            raise InvalidInput("--addattr needs --value")
        item = (check_attr_name(m.addattr), mdevctl.attr_value(m.value))
        if m.index is not None and m.index > n:
            raise _bad_index(m.index, n)
        attrs.insert(n if m.index is None else m.index, item)
    elif m.delattr:
        if m.index is not None and m.index >= n:
            raise _bad_index(m.index, n)
        if attrs:
            del attrs[-1 if m.index is None else m.index]
    type_id = m.type_id or d.type_id
    if m.type_id:
        check_type(host, d.parent, type_id)
    new = Definition(d.uuid, d.parent, type_id, m.start or d.start, tuple(attrs))
    if new == d:
        return [], d
    step = put_definition(mdevctl.path_of(host, new), new, "modify")
    callouts.guarded(env, "modify", [new], lambda: execute(env, [step]))
    return [step.describe()], new


def _bad_index(index: int, n: int) -> InvalidInput:
    return InvalidInput(f"attribute index {index} is invalid: the definition has {n} attributes", value=index)


def modify_from_json(
    env: Env, uid: str, parent: str | None, text: str, where: str, delattr: bool = False
) -> tuple[list[str], Definition]:
    """``modify --jsonfile``: replace a definition's type, start mode and attributes with the file's
    (mdevctl's stored modify; ``delattr`` then drops the last attribute, as mdevctl does)."""
    host = env.host
    old = find_one(host, uid, parent)
    if old is None:
        on = f" on {parent}" if parent else ""
        raise NotFound(f"mdev {check_uuid(uid)} is not defined{on}", value=uid, hint="see: vgpukit mdev list --defined")
    d = mdevctl.parse(old.parent, old.uuid, text, where=where)
    if delattr and d.attrs:
        d = Definition(d.uuid, d.parent, d.type_id, d.start, d.attrs[:-1])
    if d.type_id != old.type_id:
        check_type(host, d.parent, d.type_id)
    if d == old:
        return [], old
    step = put_definition(mdevctl.path_of(host, d), d, "modify")
    callouts.guarded(env, "modify", [d], lambda: execute(env, [step]))
    return [step.describe()], d
