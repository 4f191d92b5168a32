"""``modify --live``: change a running device's attributes from a file in mdevctl's format (and, with
``--defined``, its definition too), by the rules of mdevctl's ``modify --live``:

* only with ``--jsonfile``; ``--type``, ``--auto``/``--manual``, ``--index``/``--value`` are refused
  (a running device keeps its type; its start mode belongs to its definition);
* the device must be running; the file's ``mdev_type`` must be the running type; the parent is the
  running device's (``--parent``, when given, must name it);
* with ``--defined``: the definition on that parent must exist with the same type, and is replaced
  by the file (type, start mode, attributes).

mdevctl hands the change to a versioned call-out script (its ``live`` event); vgpukit writes the
file's attributes, in order, to the device's sysfs directory itself (docs/mdev.md, "modify --live").
An attribute that could be read before is written back when a later one fails (rollback).
"""

from __future__ import annotations

from ..engine import Env, Step, execute
from ..errors import InvalidInput, NotFound
from . import callouts, mdevctl, sysfs
from .model import Definition, check_attr_name, check_uuid
from .steps import SetLiveAttr, put_definition


def _current(env: Env, uid: str, attr: str) -> str | None:
    host = env.host
    return host.read_opt(host.mdev_device(uid, *check_attr_name(attr).split("/")))


def modify_live(
    env: Env, uid: str, parent: str | None, text: str, where: str, defined: bool
) -> tuple[list[str], Definition]:
    """Apply the attributes of the file ``text`` to running device ``uid`` (and with ``defined`` write
    the file as its definition). Everything is checked before the first write."""
    host = env.host
    uid = check_uuid(uid)
    inst = sysfs.find_instance(host, uid)
    if inst is None or parent not in (None, inst.parent):
        on = f"{parent}/" if parent else ""
        raise NotFound(f"Mediated device {on}{uid} is not active", value=uid, hint="see: vgpukit mdev list")
    d = mdevctl.parse(inst.parent, uid, text, where=where)
    if d.type_id != inst.type_id:
        raise InvalidInput("'type' cannot be changed on active mdev", value=d.type_id)
    steps: list[Step] = [SetLiveAttr(uid, k, v, _current(env, uid, k)) for k, v in d.attrs]
    if not defined:
        execute(env, steps)
        return [s.describe() for s in steps], d
    stored = mdevctl.matching(host, uid, inst.parent)
    if not stored:
        raise NotFound(f"Mediated device {inst.parent}/{uid} is not defined", value=uid)
    if stored[0].type_id != d.type_id:
        raise InvalidInput("'type' of active and defined mdev does not match", value=uid)
    steps.append(put_definition(mdevctl.path_of(host, d), d, "modify"))
    callouts.guarded(env, "modify", [d], lambda: execute(env, steps))
    return [s.describe() for s in steps], d
