"""``vgpukit mdev``: types, list, create, remove, define, undefine, start."""

from __future__ import annotations

from typing import Any

import click

from ..cli.context import App
from ..cli.main import dry_run_option, json_option, mutating
from ..cli.output import emit, emit_result, say, table
from ..cli.params import NAME, PARENT_DEVICE, AsciiInt
from ..errors import InvalidInput
from . import mdevctl, ops, sysfs
from .placement import PACK, SPREAD


def resolve_parent(app: App, name: str) -> str:
    """An mdev parent from its mdev_bus name (``mtty``, a BDF) or a device name (``gpu0``, short BDF)."""
    from .. import naming

    t = naming.resolve(app.host, name, frozenset({naming.PARENT}))
    assert t.parent is not None
    return t.parent


@click.group()
def mdev() -> None:
    """Mediated devices: list types, create and remove instances, keep them across reboots.

    Persistent definitions use mdevctl's files (/etc/mdevctl.d/<parent>/<uuid>), so mdevctl and
    vgpukit can manage the same host.
    """


@mdev.command("types")
@click.argument("parent", required=False, type=PARENT_DEVICE)
@json_option
@click.pass_obj
def types_cmd(app: App, parent: str | None) -> None:
    """Parents and their types: name, description, device_api, available instances."""
    host = app.host
    found = [sysfs.read_parent(host, resolve_parent(app, parent))] if parent else sysfs.parents(host)
    rows = [[t.parent, t.type_id, t.name, t.available, t.device_api, t.description] for p in found for t in p.types]

    def human() -> None:
        if not found:
            say("no mdev parents on this host (is the vendor driver loaded?)")
            return
        table(None, ["PARENT", "TYPE", "NAME", "AVAILABLE", "API", "DESCRIPTION"], rows)

    emit(app, "mdev-types", {"parents": [p.to_dict() for p in found]}, human)


@mdev.command("list")
@click.option("--defined", is_flag=True, help="Also list persistent definitions (active or not).")
@click.option(
    "--libvirt",
    "uri",
    default="qemu:///system",
    show_default=True,
    metavar="URI",
    help="Ask libvirt which domains have each instance (skipped when unreachable, on a sim, or 'none').",
)
@json_option
@click.pass_obj
def list_cmd(app: App, defined: bool, uri: str) -> None:
    """Active instances (and with --defined, persistent definitions)."""
    from .domains import lookup

    host = app.host
    insts = sysfs.instances(host)
    assigned, used_uri = lookup(uri) if uri != "none" and not app.is_sim else ({}, None)
    defs, bad = mdevctl.read_all(host)
    by_uuid = {d.uuid: d for d in defs}
    active = {i.uuid for i in insts}
    inst_docs = []
    for i in insts:
        doc = i.to_dict()
        d = by_uuid.get(i.uuid)
        doc["defined"] = d is not None
        doc["start"] = d.start if d else None
        doc["domains"] = assigned.get(i.uuid, [])
        inst_docs.append(doc)
    data: dict[str, Any] = {"instances": inst_docs, "libvirt": used_uri}
    if defined:
        data["definitions"] = [{**d.to_dict(), "active": d.uuid in active} for d in defs]
        data["unreadable"] = [{"path": b.path, "reason": b.reason} for b in bad]

    def human() -> None:
        if not insts:
            say("no active mdev instances")
        else:
            _instances_table()
        if defined:
            table(
                "persistent definitions (/etc/mdevctl.d)",
                ["UUID", "PARENT", "TYPE", "START", "ACTIVE"],
                [[d.uuid, d.parent, d.type_id, d.start, "yes" if d.uuid in active else "no"] for d in defs],
            )
            for b in bad:
                say(f"unreadable: {b.path}: {b.reason}", "yellow")

    def _instances_table() -> None:
        table(
            "active mdev instances",
            ["UUID", "PARENT", "TYPE", "GROUP", "USED BY", "DEFINED"],
            [
                [
                    i.uuid,
                    i.parent,
                    i.type_id,
                    i.iommu_group,
                    ", ".join([h.describe() for h in i.holders] + _domains(assigned.get(i.uuid, []))),
                    by_uuid[i.uuid].start if i.uuid in by_uuid else "no",
                ]
                for i in insts
            ],
        )

    emit(app, "mdev-list", data, human)


def _domains(doms: list[dict[str, Any]]) -> list[str]:
    return [f"domain {d['name']}" + ("" if d["active"] else " (defined, not running)") for d in doms]


@mdev.command("create")
@click.argument("args", nargs=-1, metavar="[PARENT] [TYPE]", type=NAME)
@click.option("--type", "type_opt", metavar="TYPE", type=NAME, help="Type id (e.g. mtty-2, nvidia-232).")
@click.option("--uuid", "uid", metavar="UUID", type=NAME, help="UUID of the instance (only with --count 1).")
@click.option("--count", type=AsciiInt(1, 1024), default=1, show_default=True, help="How many instances.")
@click.option("--pack", "strategy", flag_value=PACK, default=True, help="Fill the fullest parents first (default).")
@click.option("--spread", "strategy", flag_value=SPREAD, help="Spread instances over parents.")
@click.option(
    "--numa", type=AsciiInt(0, 1023), metavar="N", help="Only parents on NUMA node N (when PARENT is omitted)."
)
@click.option("--define", is_flag=True, help="Also write persistent definitions.")
@click.option("--auto", is_flag=True, help="With --define: start them at boot (start=auto).")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def create_cmd(
    app: App,
    args: tuple[str, ...],
    type_opt: str | None,
    uid: str | None,
    count: int,
    strategy: str,
    numa: int | None,
    define: bool,
    auto: bool,
) -> None:
    """Create instances: 'create PARENT TYPE' or 'create --type TYPE --count N' (parents chosen)."""
    if len(args) > 2 or (len(args) == 2 and type_opt):
        raise InvalidInput("usage: vgpukit mdev create [PARENT] TYPE  (or PARENT --type TYPE)")
    parent_arg = args[0] if (len(args) == 2 or (len(args) == 1 and type_opt)) else None
    type_id = type_opt or (args[-1] if args and (len(args) == 2 or not type_opt) else None)
    if not type_id:
        raise InvalidInput("which type? give 'PARENT TYPE' or --type TYPE (see: vgpukit mdev types)")
    if numa is not None and parent_arg:
        raise InvalidInput("--numa chooses parents; it cannot be combined with an explicit PARENT")
    parent = resolve_parent(app, parent_arg) if parent_arg else None
    res = ops.create(
        app.env,
        type_id,
        parent=parent,
        count=count,
        uid=uid,
        strategy=strategy,
        numa=numa,
        define=define,
        auto=auto,
    )

    def human() -> None:
        if res.instances and not app.dry_run:
            table(None, ["UUID", "PARENT", "TYPE"], [[c.uuid, c.parent, c.type_id] for c in res.instances])

    emit_result(
        app,
        "mdev-create",
        plan=res.plan,
        data={"instances": [c.to_dict() for c in res.instances], "definitions": res.definitions},
        human=human,
    )


@mdev.command("remove")
@click.argument("uuids", nargs=-1, required=True, metavar="UUID...", type=NAME)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def remove_cmd(app: App, uuids: tuple[str, ...]) -> None:
    """Remove active instances (refused while a VM holds one; persistent definitions stay)."""
    steps = ops.remove(app.env, list(uuids))
    emit_result(app, "mdev-remove", plan=steps, data={"removed": [s.split()[1] for s in steps]})


@mdev.command("define")
@click.argument("uid", required=False, metavar="[UUID]", type=NAME)
@click.option("--parent", metavar="PARENT", type=NAME, help="Define a new device on PARENT (with --type).")
@click.option("--type", "type_id", metavar="TYPE", type=NAME, help="Type of the new definition.")
@click.option("--uuid", "new_uid", metavar="UUID", type=NAME, help="UUID of the new definition (default: random).")
@click.option("--auto", is_flag=True, help="Start it at boot (start=auto); default manual.")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def define_cmd(
    app: App, uid: str | None, parent: str | None, type_id: str | None, new_uid: str | None, auto: bool
) -> None:
    """Make an active instance persistent ('define UUID') or write a new definition ('--parent --type')."""
    if uid and (parent or type_id or new_uid):
        raise InvalidInput("give either UUID (an active instance) or --parent/--type/--uuid (a new definition)")
    if uid:
        steps, d = ops.define_active(app.env, uid, auto)
    elif parent and type_id:
        steps, d = ops.define_new(app.env, _definition_parent(app, parent), type_id, new_uid, auto)
    else:
        raise InvalidInput("usage: vgpukit mdev define UUID [--auto] | define --parent P --type T [--uuid U] [--auto]")
    emit_result(
        app,
        "mdev-define",
        plan=steps,
        data={"definition": d.to_dict(), "path": mdevctl.path_of(app.host, d)},
        human=lambda: say(f"{d.uuid}: {d.type_id} on {d.parent}, start {d.start}"),
    )


def _definition_parent(app: App, name: str) -> str:
    """A parent for a definition: it may be absent now (a BDF or name), or named gpuN when present."""
    from .. import naming

    form = naming.form_of(name)
    if name in sysfs.parent_names(app.host) or form == "alias":
        return resolve_parent(app, name)
    if form == "bdf":
        from ..pci import parse_bdf

        return parse_bdf(name)
    return name


@mdev.command("undefine")
@click.argument("uid", metavar="UUID", type=NAME)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def undefine_cmd(app: App, uid: str) -> None:
    """Delete a persistent definition (an active instance keeps running)."""
    steps = ops.undefine(app.env, uid)
    emit_result(app, "mdev-undefine", plan=steps, data={"uuid": uid.lower()})


@mdev.command("start")
@click.argument("uid", required=False, metavar="[UUID]", type=NAME)
@click.option("--all", "all_", is_flag=True, help="Start every auto definition whose parent is present.")
@click.option("--parent", metavar="PARENT", type=NAME, help="With --all: only definitions on PARENT (for udev).")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def start_cmd(app: App, uid: str | None, all_: bool, parent: str | None) -> None:
    """Start defined devices: one UUID, or --all auto ones (what the boot service runs)."""
    if bool(uid) == all_:
        raise InvalidInput("usage: vgpukit mdev start UUID | start --all [--parent P]")
    if parent and not all_:
        raise InvalidInput("--parent goes with --all")
    outcomes = [ops.start_one(app.env, uid)] if uid else ops.start_all(app.env, parent)
    plan = [f"start {o.uuid} ({o.type_id} on {o.parent})" for o in outcomes if o.status in ("started", "would-start")]

    def human() -> None:
        if not outcomes:
            say("no auto-start definitions" + (f" on {parent}" if parent else ""))
            return
        table(
            None,
            ["UUID", "PARENT", "TYPE", "STATUS", "MESSAGE"],
            [[o.uuid, o.parent, o.type_id, o.status, o.message] for o in outcomes],
        )

    emit_result(app, "mdev-start", plan=plan, data={"results": [o.to_dict() for o in outcomes]}, human=human)
    if any(o.failed for o in outcomes):
        click.get_current_context().exit(1)
