"""``vgpukit mdev define / undefine / modify / start``: vgpukit's arguments and mdevctl 1.2's options."""

from __future__ import annotations

import click

from ..clikit.context import App
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import say, table
from ..clikit.params import NAME, AsciiInt
from ..errors import Conflict, InvalidInput
from . import mdevctl, ops
from .cli_args import (
    definition_parent,
    force_option,
    jsonfile_option,
    mdevctl_output,
    one_uuid,
    parent_option,
    read_jsonfile,
    report,
    type_option,
    uuid_option,
)
from .model import Definition, new_uuid

auto_option = click.option("-a", "--auto", is_flag=True, help="Start it when its parent appears (start=auto).")


@click.command("define")
@click.argument("uid", required=False, metavar="[UUID]", type=NAME)
@uuid_option("UUID: of an active instance, or of the new definition (default: random, printed).")
@parent_option("Define the device on PARENT (with --type or --jsonfile; it may be absent now).")
@type_option("Type of the new definition.")
@auto_option
@jsonfile_option("Type, start mode and attributes from FILE in mdevctl's format (with --parent).")
@force_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def define_cmd(
    app: App,
    uid: str | None,
    uuid_opt: str | None,
    parent: str | None,
    type_id: str | None,
    auto: bool,
    jsonfile: str | None,
    force: bool,
) -> None:
    """Make an active instance persistent ('define UUID') or write a new definition ('-p P -t T')."""
    uid = one_uuid(uid, uuid_opt)
    where = definition_parent(app, parent) if parent else None
    if jsonfile:
        if type_id or auto:
            raise InvalidInput("--jsonfile holds the type and start mode: it excludes --type and --auto")
        if where is None:
            raise InvalidInput("--jsonfile needs --parent")
        steps, d = ops.define_from_json(app.env, where, uid, read_jsonfile(app, jsonfile), jsonfile, force)
    elif where and type_id:
        steps, d = ops.define_new(app.env, where, type_id, uid, auto, force)
    elif uid and not type_id:
        steps, d = ops.define_active(app.env, uid, auto, parent=where, force=force)
    elif type_id:
        raise InvalidInput("--type needs --parent")
    else:
        raise InvalidInput("usage: vgpukit mdev define UUID [--auto] | define -p PARENT -t TYPE [-u UUID] [--auto]")
    report(
        app,
        "mdev-define",
        steps,
        {"definition": d.to_dict(), "path": mdevctl.path_of(app.host, d)},
        lambda: say(f"{d.uuid}: {d.type_id} on {d.parent}, start {d.start}"),
        new_uuid=None if uid else d.uuid,
    )


@click.command("undefine")
@click.argument("uid", required=False, metavar="[UUID]", type=NAME)
@uuid_option("The definition to delete (mdevctl's -u).")
@parent_option("Only its definition on PARENT (default: on every parent).")
@force_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def undefine_cmd(app: App, uid: str | None, uuid_opt: str | None, parent: str | None, force: bool) -> None:
    """Delete a persistent definition (an active instance keeps running)."""
    uid = one_uuid(uid, uuid_opt)
    if not uid:
        raise InvalidInput("which definition? give UUID or -u UUID")
    steps = ops.undefine(app.env, uid, definition_parent(app, parent) if parent else None, force)
    report(app, "mdev-undefine", steps, {"uuid": uid.lower()})


@click.command("modify")
@click.argument("uid", required=False, metavar="[UUID]", type=NAME)
@uuid_option("The definition to change (mdevctl's -u).")
@parent_option("Its parent, when the UUID is defined on several.")
@type_option("New type.")
@click.option("--addattr", metavar="NAME", type=NAME, help="Add attribute NAME (with --value), at --index or last.")
@click.option("--value", metavar="VALUE", help="Value of the attribute added by --addattr.")
@click.option("--delattr", is_flag=True, help="Delete the attribute at --index (default: the last).")
@click.option("-i", "--index", type=AsciiInt(0, 1 << 31), metavar="N", help="Attribute position (from 0).")
@auto_option
@click.option("-m", "--manual", is_flag=True, help="Start it only when asked (start=manual).")
@jsonfile_option("Replace the type, start mode and attributes with FILE's (mdevctl's format).")
@click.option("-l", "--live", is_flag=True, help="Change the running device's attributes (with --jsonfile).")
@click.option("-d", "--defined", is_flag=True, help="Change the definition (the default; with --live: both).")
@force_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def modify_cmd(
    app: App,
    uid: str | None,
    uuid_opt: str | None,
    parent: str | None,
    type_id: str | None,
    addattr: str | None,
    value: str | None,
    delattr: bool,
    index: int | None,
    auto: bool,
    manual: bool,
    jsonfile: str | None,
    live: bool,
    defined: bool,
    force: bool,
) -> None:
    """Change a definition: type, start mode, attributes (a running instance is unaffected until restarted;
    --live --jsonfile F changes the running device's attributes)."""
    uid = one_uuid(uid, uuid_opt)
    if not uid:
        raise InvalidInput("which definition? give UUID or -u UUID")
    if auto and manual:
        raise InvalidInput("--auto and --manual exclude each other")
    where = definition_parent(app, parent) if parent else None
    if live or jsonfile:
        mode = "auto" if auto else "manual" if manual else None
        attr_options = index is not None or value is not None or addattr is not None
        req = ops.FromFile("", jsonfile or "", live, defined, delattr, type_id, mode, attr_options)
        _modify_from_file(app, uid, where, req, force)
        return
    start = "auto" if auto else "manual" if manual else None
    m = ops.Modification(type_id, start, addattr, value, delattr, index)
    steps, d = ops.modify(app.env, uid, where, m, force)
    report(app, "mdev-define", steps, {"definition": d.to_dict(), "path": mdevctl.path_of(app.host, d)})


def _modify_from_file(app: App, uid: str, where: str | None, req: ops.FromFile, force: bool) -> None:
    """``modify --jsonfile F`` (the definition), ``--live --jsonfile F`` (the running device) and
    ``--live --defined --jsonfile F`` (both), refused as mdevctl refuses them (planner_modify)."""
    from msgspec.structs import replace

    from .planner_modify import check_from_file

    check_from_file(req)
    if not req.where:
        raise InvalidInput("'live' option must be used with 'jsonfile' option")
    req = replace(req, text=read_jsonfile(app, req.where))
    steps, d = ops.modify_from_file(app.env, uid, where, req, force)
    data = {"definition": d.to_dict(), "path": mdevctl.path_of(app.host, d), "live": req.live}
    report(app, "mdev-define", steps, data)


@click.command("start")
@click.argument("uid", required=False, metavar="[UUID]", type=NAME)
@uuid_option("The device: a definition's UUID, or the UUID of a new transient device.")
@parent_option("Its parent (a transient device; with --all: only this parent's definitions).")
@type_option("Type of a transient device (with --parent).")
@jsonfile_option("A transient device's type and attributes from FILE in mdevctl's format (with --parent).")
@click.option("--all", "all_", is_flag=True, help="Start every auto definition whose parent is present.")
@force_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def start_cmd(
    app: App,
    uid: str | None,
    uuid_opt: str | None,
    parent: str | None,
    type_id: str | None,
    jsonfile: str | None,
    all_: bool,
    force: bool,
) -> None:
    """Start defined devices (one UUID, or --all auto ones: the boot service), or a transient device
    ('-p PARENT -t TYPE [-u UUID]', mdevctl's start)."""
    uid = one_uuid(uid, uuid_opt)
    where = definition_parent(app, parent) if parent else None
    if all_:
        if uid or type_id or jsonfile:
            raise InvalidInput("--all starts every auto definition: it takes only --parent")
        _show(app, ops.start_all(app.env, where), where)
        return
    if jsonfile:
        if type_id:
            raise InvalidInput("--jsonfile holds the type: it excludes --type")
        if where is None:
            raise InvalidInput("--jsonfile needs --parent")
        d = mdevctl.parse(where, uid or new_uuid(), read_jsonfile(app, jsonfile), where=jsonfile)
        _mdevctl_refusal(app, d, force)
        _show(app, [ops.start_transient(app.env, d, force)], None, None if uid else d.uuid)
        return
    defined = ops.find_one(app.host, uid, where) if uid else None
    if defined is not None:
        if type_id and type_id != defined.type_id:
            raise Conflict(f"{defined.uuid} is defined as {defined.type_id} on {defined.parent}", value=uid)
        _mdevctl_refusal(app, defined, force)
        outcome = ops.start(app.env, defined, force)
    elif where and type_id:
        d = Definition(uid or new_uuid(), where, type_id)
        _mdevctl_refusal(app, d, force)
        outcome = ops.start_transient(app.env, d, force)
    elif type_id:
        raise InvalidInput("--type needs --parent")
    elif uid:
        outcome = ops.start_one(app.env, uid, force)  # says why: no definition, or not a valid one
    else:
        raise InvalidInput("usage: vgpukit mdev start UUID | start -p PARENT -t TYPE [-u UUID] | start --all [-p P]")
    _show(app, [outcome], None, None if uid else outcome.uuid)


def _mdevctl_refusal(app: App, d: Definition, force: bool) -> None:
    """Under ``--mdevctl``: mdevctl's refusal of starting ``d`` in its words (exit 1, as mdevctl), with
    the call-out scripts around it as mdevctl runs them (the planner's mdevctl_start_refusal)."""
    if mdevctl_output() and not app.json and not app.dry_run:
        ops.refuse_as_mdevctl(app.env, d, force)


def _show(app: App, outcomes: list[ops.StartOutcome], parent: str | None, new: str | None = None) -> None:
    plan = [f"start {o.uuid} ({o.type_id} on {o.parent})" for o in outcomes if o.status in ("started", "would-start")]
    failed = [o for o in outcomes if o.failed]
    if mdevctl_output() and not app.json and not app.dry_run:
        if parent is None:  # one device asked for (mdevctl's start): an absent parent is an error
            failed += [o for o in outcomes if o.status == "parent-absent"]
        for o in failed:
            click.echo(f"vgpukit: error: {o.uuid}: {o.status}: {o.message}", err=True)
        if failed:
            click.get_current_context().exit(1)
        if new:
            click.echo(new)
        return

    def human() -> None:
        if not outcomes:
            say("no auto-start definitions" + (f" on {parent}" if parent else ""))
            return
        table(
            None,
            ["UUID", "PARENT", "TYPE", "STATUS", "MESSAGE"],
            [[o.uuid, o.parent, o.type_id, o.status, o.message] for o in outcomes],
        )

    report(app, "mdev-start", plan, {"results": [o.to_dict() for o in outcomes]}, human)
    if failed:
        click.get_current_context().exit(1)


@click.command("start-parent-mdevs", hidden=True)
@click.argument("parent", type=NAME)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def start_parent_cmd(app: App, parent: str) -> None:
    """mdevctl's udev hook: start PARENT's auto definitions (= start --all --parent PARENT)."""
    _show(app, ops.start_all(app.env, parent), parent)
