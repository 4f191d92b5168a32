"""Mutating mdev operations: plan, apply, verify, roll back.

Every operation validates its input and computes its plan before the first write; multi-instance
creation is all-or-nothing (a failure half-way removes what this call created).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..errors import Busy, Conflict, InvalidInput, NoCapacity, NotFound, VerifyFailed, VgpukitError
from ..host import Host
from . import mdevctl, sysfs
from .model import Definition, check_type_id, check_uuid, new_uuid
from .placement import PACK, Slot, candidates, plan

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
    host: Host,
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
                    _define_quietly(host, Definition(uid, existing.parent, type_id, _start_of(auto)), result)
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
    result.plan = [f"create {type_id} {u} on {p}" for p, u in todo]
    if define:
        result.plan += [f"define {u} on {p} (start {_start_of(auto)})" for p, u in todo]
    if host.dry_run:
        result.instances = [Created(u, p, type_id) for p, u in todo]
        return result
    made = _create_all(host, type_id, todo)
    result.instances = made
    if define:
        for c in made:
            d = Definition(c.uuid, c.parent, type_id, _start_of(auto))
            mdevctl.write(host, d)
            result.definitions.append(mdevctl.path_of(host, d))
    return result


def _define_quietly(host: Host, d: Definition, result: CreateResult) -> None:
    if mdevctl.find(host, d.uuid) != d:
        result.plan.append(f"define {d.uuid} on {d.parent} (start {d.start})")
        if not host.dry_run:
            mdevctl.write(host, d)
            result.definitions.append(mdevctl.path_of(host, d))


def _create_all(host: Host, type_id: str, todo: list[tuple[str, str]]) -> list[Created]:
    made: list[Created] = []
    try:
        for parent, u in todo:
            # Sibling types share capacity: trust the kernel's current count, not the plan.
            if sysfs.read_type(host, parent, type_id).available < 1:
                raise NoCapacity(f"{parent} ran out of capacity for {type_id} while creating", device=parent)
            sysfs.create(host, parent, type_id, u)
            if not host.exists(host.sys("bus", "mdev", "devices", u)):
                raise VerifyFailed(f"wrote {u} to {parent}/{type_id}/create but no such mdev appeared", value=u)
            made.append(Created(u, parent, type_id))
    except VgpukitError as err:
        undone = rollback(host, made)
        if made:
            err.message += f"; rolled back the {undone} instance(s) this command had created"
        raise
    return made


def rollback(host: Host, made: list[Created]) -> int:
    n = 0
    for c in reversed(made):
        try:
            sysfs.remove(host, c.uuid)
            n += 1
        except VgpukitError as exc:  # keep undoing the rest; say what stays behind
            log.warning("rollback: could not remove %s: %s", c.uuid, exc)
    return n


def remove(host: Host, uids: list[str]) -> list[str]:
    """Remove active instances (their definitions stay). All are checked before the first removal."""
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
    steps = [f"remove {u} ({active[u].type_id} on {active[u].parent})" for u in wanted]
    if not host.dry_run:
        for u in wanted:
            sysfs.remove(host, u)
            if host.exists(host.sys("bus", "mdev", "devices", u)):
                raise VerifyFailed(f"mdev {u} is still present after remove", value=u)
    return steps


def define_active(host: Host, uid: str, auto: bool) -> tuple[list[str], Definition]:
    """Make an active instance persistent (or change its start mode)."""
    uid = check_uuid(uid)
    inst = sysfs.find_instance(host, uid)
    if inst is None:
        raise NotFound(
            f"no active mdev {uid}", value=uid, hint="to define a new one: vgpukit mdev define --parent P --type T"
        )
    return _put(host, Definition(uid, inst.parent, inst.type_id, _start_of(auto)))


def define_new(host: Host, parent: str, type_id: str, uid: str | None, auto: bool) -> tuple[list[str], Definition]:
    check_type_id(type_id)
    uid = check_uuid(uid) if uid else new_uuid()
    if host.exists(host.sys("class", "mdev_bus", parent)):
        if sysfs.read_parent(host, parent).type(type_id) is None:
            raise NotFound(f"parent {parent} has no mdev type {type_id}", device=parent, hint="see: vgpukit mdev types")
    else:
        from .model import check_parent_name

        check_parent_name(parent)
    return _put(host, Definition(uid, parent, type_id, _start_of(auto)))


def _put(host: Host, d: Definition) -> tuple[list[str], Definition]:
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
    mdevctl.write(host, d)
    verb = "define" if old is None else "change start mode of"
    return [f"{verb} {d.uuid} ({d.type_id} on {d.parent}, start {d.start}) in {mdevctl.path_of(host, d)}"], d


def undefine(host: Host, uid: str) -> list[str]:
    uid = check_uuid(uid)
    d = mdevctl.find(host, uid)
    if d is None:
        raise NotFound(f"no persistent definition for {uid}", value=uid, hint="see: vgpukit mdev list --defined")
    mdevctl.delete(host, d)
    return [f"undefine {uid} (remove {mdevctl.path_of(host, d)})"]


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


def start(host: Host, d: Definition) -> StartOutcome:
    """Create the instance of one definition (and set its attrs) unless it is already active."""
    out = StartOutcome(d.uuid, d.parent, d.type_id, "started")
    active = sysfs.find_instance(host, d.uuid)
    if active is not None:
        if (active.parent, active.type_id) == (d.parent, d.type_id):
            out.status = "active"
        else:
            out.status, out.message = "conflict", f"UUID is active as {active.type_id} on {active.parent}"
        return out
    if not host.exists(host.sys("class", "mdev_bus", d.parent)):
        out.status, out.message = "parent-absent", "parent not present; started when it appears (udev rule)"
        return out
    if host.dry_run:
        out.status = "would-start"
        return out
    try:
        sysfs.create(host, d.parent, d.type_id, d.uuid)
    except VgpukitError as err:
        out.status, out.message = "failed", str(err)
        return out
    try:
        for attr, value in d.attrs:
            sysfs.write_attr(host, d.uuid, attr, value)
    except VgpukitError as err:
        rollback(host, [Created(d.uuid, d.parent, d.type_id)])
        out.status, out.message = "failed", f"setting attributes: {err}; instance removed again"
    return out


def start_all(host: Host, parent: str | None = None) -> list[StartOutcome]:
    """Start every ``auto`` definition (on ``parent`` only, when given): what the boot service runs."""
    defs, bad = mdevctl.read_all(host)
    for b in bad:
        log.warning("skipping %s: %s", b.path, b.reason)
    return [start(host, d) for d in defs if d.auto and (parent is None or d.parent == parent)]


def start_one(host: Host, uid: str) -> StartOutcome:
    uid = check_uuid(uid)
    d = mdevctl.find(host, uid)
    if d is None:
        raise NotFound(f"no persistent definition for {uid}", value=uid, hint="see: vgpukit mdev list --defined")
    return start(host, d)


def slots_text(slots: list[Slot]) -> str:
    return ", ".join(f"{s.count} on {s.parent}" for s in slots)
