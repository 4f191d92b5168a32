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
from . import mdevctl, sysfs
from .model import Definition, check_type_id, check_uuid, new_uuid
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
    execute(env, steps)
    if define and not host.dry_run:
        result.definitions = [mdevctl.path_of(host, Definition(u, p, type_id)) for p, u in todo]
    return result


def _define_quietly(env: Env, d: Definition, result: CreateResult) -> None:
    if mdevctl.find(env.host, d.uuid) != d:
        step = put_definition(mdevctl.path_of(env.host, d), d)
        result.plan.append(step.describe())
        execute(env, [step])
        if not env.host.dry_run:
            result.definitions.append(mdevctl.path_of(env.host, d))


def remove(env: Env, uids: list[str]) -> list[str]:
    """Remove active instances (their definitions stay). All are checked before the first removal."""
    host = env.host
    wanted = list(dict.fromkeys(check_uuid(u) for u in uids))
    active = {i.uuid: i for i in sysfs.instances(host)}
    missing = [u for u in wanted if u not in active]
    if missing:
        raise NotFound(f"no active mdev {', '.join(missing)}", value=missing[0], hint="see: vgpukit mdev list")
    for u in wanted:
        inst = active[u]
        if inst.in_use:
            users = ", ".join(h.describe() for h in inst.holders)
            raise Busy(
                f"mdev {u} is in use by {users}", value=u, hint="stop or detach the VM first; nothing was removed"
            )
    steps: list[Step] = [RemoveMdev(u, active[u].parent, active[u].type_id) for u in wanted]
    execute(env, steps)
    return [s.describe() for s in steps]


def define_active(env: Env, uid: str, auto: bool) -> tuple[list[str], Definition]:
    """Make an active instance persistent (or change its start mode)."""
    host = env.host
    uid = check_uuid(uid)
    inst = sysfs.find_instance(host, uid)
    if inst is None:
        raise NotFound(
            f"no active mdev {uid}", value=uid, hint="to define a new one: vgpukit mdev define --parent P --type T"
        )
    return _put(env, Definition(uid, inst.parent, inst.type_id, _start_of(auto)))


def define_new(env: Env, parent: str, type_id: str, uid: str | None, auto: bool) -> tuple[list[str], Definition]:
    host = env.host
    check_type_id(type_id)
    uid = check_uuid(uid) if uid else new_uuid()
    if host.exists(host.mdev_parent(parent)):
        if sysfs.read_parent(host, parent).type(type_id) is None:
            raise NotFound(f"parent {parent} has no mdev type {type_id}", device=parent, hint="see: vgpukit mdev types")
    else:
        from .model import check_parent_name

        check_parent_name(parent)
    return _put(env, Definition(uid, parent, type_id, _start_of(auto)))


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
    execute(env, [step])
    return [step.describe()], d


def undefine(env: Env, uid: str) -> list[str]:
    """Delete every definition file of ``uid`` (whatever the case of its name; a bad file too)."""
    host = env.host
    uid = check_uuid(uid)
    paths = mdevctl.files_of(host, uid)
    if not paths:
        raise NotFound(f"no persistent definition for {uid}", value=uid, hint="see: vgpukit mdev list --defined")
    steps: list[Step] = [drop_definition(host.display(p), uid) for p in paths]
    execute(env, steps)
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
        execute(env, steps)
    except VgpukitError as err:
        out.status, out.message = "failed", str(err)
    return out


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
