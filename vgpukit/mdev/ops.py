"""Mutating mdev operations: read the facts, ask :mod:`vgpukit.mdev.planner`, execute, report.

Every operation's plan (call-out steps included) is computed before the first write; multi-instance
creation is all-or-nothing (a failure half-way removes what this call created).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..engine import Env, execute
from ..engine.files import PutFile
from ..errors import InvalidInput, NotFound, StorageFault, VgpukitError
from ..host import Host
from ..logs import logger
from . import callouts, mdevctl, planner, planner_modify
from .model import PACK, Definition, check_uuid, new_uuid
from .steps import CalloutLive, RemoveMdev

log = logger("vgpukit.mdev")


class Created(msgspec.Struct):
    uuid: str
    parent: str
    type_id: str

    def to_dict(self) -> dict[str, Any]:  # a reshape: type_id is shown as type, as mdev list --json
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
    """Create ``count`` instances of ``type_id`` (on ``parent``, or on parents chosen by ``strategy``;
    ``parents`` restricts the choice, as ``vgpu create`` does): :func:`planner.create`, executed."""
    host = env.host
    req = planner.Create(
        type_id, count, parent, tuple(parents) if parents is not None else None, uid, strategy, numa, define, auto
    )
    todo = planner.create(planner.read(host, nvml=lambda: env.nvml), req)
    execute(env, todo.steps)
    result = CreateResult(todo.describe(), [Created(d.uuid, d.parent, d.type_id) for d in todo.instances])
    if not host.dry_run:
        result.definitions = [mdevctl.path_of(host, d) for d in todo.definitions]
    return result


def remove(env: Env, uids: list[str], force: bool = False, uri: str | None = None) -> list[str]:
    """Remove active instances (their definitions stay). All are checked before the first removal.
    ``uri``: the libvirt whose running domains naming a device count as its users."""
    todo = planner.remove(planner.read(env.host, definitions=False, uri=uri), uids, force)
    execute(env, todo.steps)
    return [s.describe() for s in todo.steps if isinstance(s, RemoveMdev)]


def define_active(
    env: Env, uid: str, auto: bool, parent: str | None = None, force: bool = False
) -> tuple[list[str], Definition]:
    """Make an active instance persistent (or change its start mode); with ``parent``, define it on
    that parent with the instance's type (mdevctl's ``define -u U -p P``). A call-out script that
    handles the type supplies its attributes (``get`` event)."""
    host = env.host
    facts = planner.read(host)
    inst = planner.active_one(facts, uid, parent)
    d = Definition(inst.uuid, parent or inst.parent, inst.type_id, _start_of(auto))
    return _put(env, facts, _with_running_attributes(host, facts, d, any_parent=True), force)


def _with_running_attributes(host: Host, facts: planner.Facts, d: Definition, any_parent: bool = False) -> Definition:
    """``d`` with the attributes a call-out script reports (``get``) when :func:`planner.attributes_wanted`
    says mdevctl asks for them (a failing script refuses the define)."""
    if not planner.attributes_wanted(facts, d, any_parent):
        return d
    inst = facts.instance(d.uuid)
    assert inst is not None
    attrs = callouts.get_attributes(host, Definition(d.uuid, inst.parent, inst.type_id), strict=True)
    return Definition(d.uuid, d.parent, d.type_id, d.start, tuple(attrs or ()))


def define_new(
    env: Env, parent: str, type_id: str, uid: str | None, auto: bool, force: bool = False
) -> tuple[list[str], Definition]:
    facts = planner.read(env.host)
    type_id = planner.type_named(facts.parents, type_id, [parent])  # a type's name (T4-4Q) names its id
    d = Definition(check_uuid(uid) if uid else new_uuid(), parent, type_id, _start_of(auto))
    planner.check_type(facts, parent, type_id)
    return _put(env, facts, _with_running_attributes(env.host, facts, d), force)


def define_from_json(
    env: Env, parent: str, uid: str | None, text: str, where: str, force: bool = False
) -> tuple[list[str], Definition]:
    """``define --jsonfile``: type, start mode and attributes from a file in mdevctl's format; an
    existing definition of the UUID is never overwritten."""
    d = mdevctl.parse(parent, check_uuid(uid) if uid else new_uuid(), text, where=where)
    facts = planner.read(env.host)
    planner.check_type(facts, parent, d.type_id)
    return _put(env, facts, d, force, overwrite=False)


def check_type(host: Host, parent: str, type_id: str) -> None:
    """``type_id`` must be one of ``parent``'s types when the parent is present (else only well-formed)."""
    planner.check_type(planner.read(host, definitions=False), parent, type_id)


def _put(
    env: Env, facts: planner.Facts, d: Definition, force: bool, overwrite: bool = True
) -> tuple[list[str], Definition]:
    todo, d = planner.put(facts, d, force, overwrite)
    execute(env, todo.steps)
    return [s.describe() for s in todo.steps if isinstance(s, PutFile)], d


def undefine(env: Env, uid: str, parent: str | None = None, force: bool = False) -> list[str]:
    """Delete every definition file of ``uid`` (on ``parent`` only, when given; whatever the case of
    its name; a bad file too)."""
    host = env.host
    uid = check_uuid(uid)
    paths = [host.display(p) for p in mdevctl.files_of(host, uid) if parent in (None, p.parent.name)]
    todo = planner.undefine(planner.read(host), uid, paths, parent, force)
    execute(env, todo.steps)
    return [s.describe() for s in todo.steps if isinstance(s, PutFile)]


class StartOutcome(msgspec.Struct):
    uuid: str
    parent: str
    type_id: str
    status: str  # started | active | parent-absent | conflict | failed | would-start
    message: str = ""

    def to_dict(self) -> dict[str, Any]:  # a reshape: type_id is shown as type, as mdev list --json
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


def start(env: Env, d: Definition, force: bool = False, keep_going: bool = False) -> StartOutcome:
    """Create the instance of one definition (and set its attrs) unless it is already active.

    Each definition is its own change: a failure (or a failing attribute) leaves no instance behind.
    A refusal (no such type, no room, a call-out's veto) is raised, unless ``keep_going`` (``start
    --all``: that device fails, the others go on).
    """
    out = StartOutcome(d.uuid, d.parent, d.type_id, "started")
    try:
        todo = planner.start(planner.read(env.host, definitions=False, nvml=lambda: env.nvml), d, force)
    except VgpukitError as err:
        if not keep_going:
            raise
        out.status, out.message = "failed", str(err)
        return out
    out.status, out.message = todo.status, todo.message
    if todo.status != "started":
        return out
    if env.host.dry_run:
        out.status = "would-start"
        return out
    try:
        execute(env, todo.plan.steps)
    except VgpukitError as err:
        if isinstance(err, StorageFault) or (isinstance(err, callouts.CalloutRefused) and not keep_going):
            raise  # a full or read-only file system fails every device alike: one line, not one per device
        out.status, out.message = "failed", str(err)
    return out


def start_transient(env: Env, d: Definition, force: bool = False) -> StartOutcome:
    """Start a device that has no definition (mdevctl's ``start -p P -t T`` / ``--jsonfile``)."""
    planner.type_of(planner.read(env.host, definitions=False), d.parent, d.type_id)
    return start(env, d, force)


def find_one(host: Host, uid: str, parent: str | None) -> Definition | None:
    """The one definition of ``uid`` (on ``parent``); refused when several parents define it."""
    return planner.one_definition(planner.read(host), uid, parent)


def start_all(env: Env, parent: str | None = None) -> list[StartOutcome]:
    """Start every ``auto`` definition (on ``parent`` only, when given): what the boot service runs."""
    defs, bad = mdevctl.read_all(env.host)
    for b in bad:
        log.warning("skipping %s: %s", b.path, b.reason)
    return [start(env, d, keep_going=True) for d in defs if d.auto and (parent is None or d.parent == parent)]


def start_one(env: Env, uid: str, force: bool = False) -> StartOutcome:
    uid = check_uuid(uid)
    d = mdevctl.find(env.host, uid)
    bad = mdevctl.bad_file_of(env.host, uid) if d is None else None
    if bad is not None:
        raise InvalidInput(
            f"the definition {bad.path} is not valid: {bad.reason}", value=uid, hint="fix or undefine it"
        )
    if d is None:
        raise NotFound(f"no persistent definition for {uid}", value=uid, hint="see: vgpukit mdev list --defined")
    return start(env, d, force)


Modification = planner_modify.Modification
FromFile = planner_modify.FromFile


def modify(
    env: Env, uid: str, parent: str | None, m: Modification, force: bool = False
) -> tuple[list[str], Definition]:
    """Change a definition (type, start mode, one attribute added or deleted): :func:`planner_modify.modify`."""
    todo, new = planner_modify.modify(planner.read(env.host), uid, parent, m, force)
    execute(env, todo.steps)
    return [s.describe() for s in todo.steps if isinstance(s, PutFile)], new


def modify_from_file(
    env: Env, uid: str, parent: str | None, req: FromFile, force: bool = False
) -> tuple[list[str], Definition]:
    """``modify --jsonfile F`` (the definition) or ``--live --jsonfile F`` (the running device, and with
    ``--defined`` its definition too): :mod:`planner_modify`, executed."""
    host = env.host
    facts = planner.read(host)
    if req.live:
        todo, d = planner_modify.modify_live(facts, uid, parent, req, force)
    else:
        todo, d = planner_modify.modify_from_file(facts, uid, parent, req, force)
    execute(env, todo.steps)
    return [s.describe() for s in todo.steps if isinstance(s, (PutFile, CalloutLive))], d


def refuse_as_mdevctl(env: Env, d: Definition, force: bool = False) -> None:
    """Under ``--mdevctl``: raise mdevctl's refusal of starting ``d`` (in its words), after running the
    call-outs around it as mdevctl does (:func:`planner.mdevctl_start_refusal`); nothing when it would go on."""
    todo = planner.mdevctl_start_refusal(planner.read(env.host, definitions=False), d, force)
    if todo is None:
        return
    try:
        execute(env, todo.steps)
    except VgpukitError as err:
        said = err.__cause__
        if isinstance(said, VgpukitError) and str(err) == f"{said}; nothing was changed":
            raise said from None  # mdevctl's words as they are (the call-outs changed nothing)
        raise
