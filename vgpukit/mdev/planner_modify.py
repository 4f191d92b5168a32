"""The mdev planner's ``modify`` rules (split from :mod:`vgpukit.mdev.planner`, whose facts and call-out
wrapping they use): attribute edits, ``modify --jsonfile`` (replace a definition from a file) and
``modify --live`` (a running device's attributes, and with ``--defined`` its definition too), each with
mdevctl's refusals. Typed request in, steps (or a refusal, raised) out; nothing is executed here.

``--live`` follows mdevctl's ``modify --live``: the device must be running; the file's ``mdev_type``
must be the running type; the parent is the running device's (``--parent``, when given, must name it);
with ``--defined`` the definition on that parent must exist with the same type and is replaced by the
file. The change itself is the device's versioned call-out script's (its ``live`` event), as in
mdevctl: without call-out scripts it is refused here, and the step that asks the script refuses when
none is versioned or supports the event (docs/mdev.md, "modify --live").
"""

from __future__ import annotations

import msgspec

from ..engine import Step
from ..errors import InvalidInput, NotFound, Unsupported
from . import mdevctl
from .callouts import NO_LIVE
from .model import Definition, check_attr_name, check_uuid
from .planner import Facts, MdevPlan, check_type, one_definition, wrapped
from .steps import CalloutLive, put_definition


class Modification(msgspec.Struct, frozen=True):
    """What ``modify`` changes in a definition (mdevctl's ``modify`` options)."""

    type_id: str | None = None
    start: str | None = None  # auto | manual | None (unchanged)
    addattr: str | None = None
    value: str | None = None
    delattr: bool = False
    index: int | None = None


def _bad_index(index: int, n: int) -> InvalidInput:
    return InvalidInput(f"attribute index {index} is invalid: the definition has {n} attributes", value=index)


def _defined(facts: Facts, uid: str, parent: str | None) -> Definition:
    d = one_definition(facts, uid, parent)
    if d is None:
        on = f" on {parent}" if parent else ""
        raise NotFound(f"mdev {check_uuid(uid)} is not defined{on}", value=uid, hint="see: vgpukit mdev list --defined")
    return d


def _replace(facts: Facts, old: Definition, new: Definition, force: bool) -> tuple[MdevPlan, Definition]:
    """The plan that writes ``new`` over ``old`` (nothing when they are equal), call-outs around it."""
    if new == old:
        return MdevPlan(), old
    if new.type_id != old.type_id:
        check_type(facts, new.parent, new.type_id)
    step = put_definition(facts.path(new), new, "modify")
    return MdevPlan(wrapped(facts, "modify", [new], [step], force), definitions=[new]), new


def modify(
    facts: Facts, uid: str, parent: str | None, m: Modification, force: bool = False
) -> tuple[MdevPlan, Definition]:
    """Change a definition (type, start mode, one attribute added or deleted); nothing when nothing
    changes. An active instance is left as it is (the change applies at its next start)."""
    d = _defined(facts, uid, parent)
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
    new = Definition(d.uuid, d.parent, m.type_id or d.type_id, m.start or d.start, tuple(attrs))
    return _replace(facts, d, new, force)


class FromFile(msgspec.Struct, frozen=True):
    """``modify --jsonfile``: the file's ``text`` (``where``: its name, for messages); ``live``,
    ``defined``: mdevctl's ``--live`` / ``--defined``; the other options only to refuse them."""

    text: str
    where: str
    live: bool = False
    defined: bool = False
    delattr: bool = False
    type_id: str | None = None
    start: str | None = None
    attr_options: bool = False  # --addattr, --value or --index given


def check_from_file(req: FromFile) -> None:
    """mdevctl's refusals of the options that do not go with ``--jsonfile`` / ``--live``."""
    if req.live and req.type_id:
        raise InvalidInput("'type' cannot be changed on active mdev")
    if req.live and req.start:
        raise InvalidInput(f"'{req.start}' cannot be changed on active mdev")
    if req.type_id or req.start:
        raise InvalidInput("--jsonfile holds the type and start mode: it excludes --type, --auto and --manual")
    if req.attr_options or (req.live and req.delattr):
        raise InvalidInput("--jsonfile holds the attributes: it excludes --addattr, --value and --index")


def modify_from_file(
    facts: Facts, uid: str, parent: str | None, req: FromFile, force: bool = False
) -> tuple[MdevPlan, Definition]:
    """``modify --jsonfile F``: replace the definition's type, start mode and attributes with the
    file's (``delattr`` then drops the last attribute, as mdevctl does)."""
    check_from_file(req)
    old = _defined(facts, uid, parent)
    d = mdevctl.parse(old.parent, old.uuid, req.text, where=req.where)
    if req.delattr and d.attrs:
        d = Definition(d.uuid, d.parent, d.type_id, d.start, d.attrs[:-1])
    return _replace(facts, old, d, force)


def modify_live(
    facts: Facts, uid: str, parent: str | None, req: FromFile, force: bool = False
) -> tuple[MdevPlan, Definition]:
    """``modify --live --jsonfile F``: hand the file's configuration of running device ``uid`` to its
    versioned call-out script (a :class:`CalloutLive` step); with ``defined`` also write the file as its
    definition (call-outs around that change)."""
    check_from_file(req)
    uid = check_uuid(uid)
    inst = facts.instance(uid)
    if inst is None or parent not in (None, inst.parent):
        on = f"{parent}/" if parent else ""
        raise NotFound(f"Mediated device {on}{uid} is not active", value=uid, hint="see: vgpukit mdev list")
    d = mdevctl.parse(inst.parent, uid, req.text, where=req.where)
    if d.type_id != inst.type_id:
        raise InvalidInput("'type' cannot be changed on active mdev", value=d.type_id)
    if req.defined:
        stored = [x for x in facts.definitions if x.uuid == uid and x.parent == inst.parent]
        if not stored:
            raise NotFound(f"Mediated device {inst.parent}/{uid} is not defined", value=uid)
        if stored[0].type_id != d.type_id:
            raise InvalidInput("'type' of active and defined mdev does not match", value=uid)
    if not facts.callouts:  # no script at all: none can be versioned (the step asks those there are)
        raise Unsupported(NO_LIVE, value=uid, hint="the vendor's versioned call-out script changes a running mdev")
    steps: list[Step] = [CalloutLive("modify", uid, d.parent, d.type_id, d.start, tuple(d.attrs))]
    if not req.defined:
        return MdevPlan(steps), d
    steps.append(put_definition(facts.path(d), d, "modify"))
    return MdevPlan(wrapped(facts, "modify", [d], steps, force), definitions=[d]), d
