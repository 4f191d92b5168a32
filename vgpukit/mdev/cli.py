"""``vgpukit mdev``: types, list, create, remove/stop, define, undefine, modify, start -- vgpukit's own
commands, which also take mdevctl 1.2's command line (``-u -p -t``, ``--dumpjson``...; docs/mdev.md)."""

from __future__ import annotations

from typing import Any

import click

from .. import __version__
from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, say, table
from ..clikit.params import MDEV_DEVICE, NAME, PARENT_DEVICE, AsciiInt, MdevCreateArgs
from ..errors import InvalidInput
from . import listing, mdevctl, sysfs
from .cli_args import (
    MDEVCTL,
    force_option,
    mdevctl_output,
    one_uuid,
    parent_option,
    report,
    resolve_parent,
    uuid_option,
)
from .model import PACK, SPREAD

# mdevctl's define/undefine/modify/start (and the change machinery behind them) load only when used
_CHANGE_COMMANDS = {
    name: ("vgpukit.mdev.cli_change", attr, "")
    for name, attr in (
        ("define", "define_cmd"),
        ("undefine", "undefine_cmd"),
        ("modify", "modify_cmd"),
        ("start", "start_cmd"),
        ("start-parent-mdevs", "start_parent_cmd"),
    )
}


@click.group(cls=LazyGroup, lazy=_CHANGE_COMMANDS)
@click.option(
    "--mdevctl",
    "mdevctl_mode",
    is_flag=True,
    help="mdevctl's own output: its list/types text, the new UUID alone from define/start, else silent.",
)
@click.version_option(__version__, "-V", "--version", prog_name="vgpukit mdev")
@click.pass_context
def mdev(ctx: click.Context, mdevctl_mode: bool) -> None:
    """Mediated devices: list types, create and remove instances, keep them across reboots.

    Persistent definitions use mdevctl's files (/etc/mdevctl.d/<parent>/<uuid>), so mdevctl and
    vgpukit can manage the same host; mdevctl's command line works too (with --mdevctl, its output:
    'mdevctl() { vgpukit mdev --mdevctl "$@"; }').
    """
    ctx.meta[MDEVCTL] = mdevctl_mode


def _no_json_with_dumpjson(app: App, dumpjson: bool) -> None:
    if dumpjson and app.json:
        raise InvalidInput("--dumpjson (mdevctl's JSON) and --json (vgpukit's) exclude each other")


@mdev.command("types")
@click.argument("parent", required=False, type=PARENT_DEVICE)
@parent_option("Only this parent's types (mdevctl's -p).", dest="parent_opt")
@click.option("--dumpjson", is_flag=True, help="mdevctl's JSON form.")
@json_option
@click.pass_obj
def types_cmd(app: App, parent: str | None, parent_opt: str | None, dumpjson: bool) -> None:
    """Parents and their types: name, description, device_api, available instances."""
    _no_json_with_dumpjson(app, dumpjson)
    host = app.host
    parent = parent or parent_opt
    if parent and mdevctl_output() and not app.json and parent not in sysfs.parent_names(host):
        found = []  # mdevctl: no such parent is an empty listing, exit 0
    else:
        found = [sysfs.read_parent(host, resolve_parent(app, parent))] if parent else sysfs.parents(host)
    if dumpjson or (mdevctl_output() and not app.json):
        click.echo(listing.types_json(found) if dumpjson else listing.types_text(found))
        return
    rows = [[t.parent, t.type_id, t.name, t.available, t.device_api, t.description] for p in found for t in p.types]

    def human() -> None:
        if not found:
            say("no mdev parents on this host (is the vendor driver loaded?)")
            return
        table(None, ["PARENT", "TYPE", "NAME", "AVAILABLE", "API", "DESCRIPTION"], rows)

    emit(app, "mdev-types", {"parents": [p.to_dict() for p in found]}, human)


@mdev.command("list")
@click.option("-d", "--defined", is_flag=True, help="Also list persistent definitions (mdevctl: only them).")
@uuid_option("Only this device.")
@parent_option("Only devices on this parent.")
@click.option("-v", "--verbose", is_flag=True, help="Show the definitions' attributes.")
@click.option("--dumpjson", is_flag=True, help="mdevctl's JSON form (one device's config when -u names one).")
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
def list_cmd(
    app: App, defined: bool, uuid_opt: str | None, parent: str | None, verbose: bool, dumpjson: bool, uri: str
) -> None:
    """Active instances (and with --defined, persistent definitions)."""
    _no_json_with_dumpjson(app, dumpjson)
    host = app.host
    if dumpjson or (mdevctl_output() and not app.json):
        found = listing.entries(host, defined, uuid_opt, parent)
        click.echo(listing.list_json(found, uuid_opt) if dumpjson else listing.list_text(found, defined, verbose))
        return
    from .model import check_uuid

    want = check_uuid(uuid_opt) if uuid_opt else None

    def wanted(uid: str, par: str) -> bool:
        return want in (None, uid) and parent in (None, par)

    insts = [i for i in sysfs.instances(host) if wanted(i.uuid, i.parent)]
    assigned: dict[str, list[dict[str, Any]]] = {}
    used_uri: str | None = None
    if uri != "none" and not app.is_sim:
        from .domains import lookup  # libvirt's modules load only when it is asked

        assigned, used_uri = lookup(uri)
    all_defs, bad = mdevctl.read_all(host)
    defs = [d for d in all_defs if wanted(d.uuid, d.parent)]
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
            cols = ["UUID", "PARENT", "TYPE", "START", "ACTIVE"] + (["ATTRS"] if verbose else [])
            rows = [
                [d.uuid, d.parent, d.type_id, d.start, "yes" if d.uuid in active else "no"]
                + ([", ".join(f"{k}={v}" for k, v in d.attrs)] if verbose else [])
                for d in defs
            ]
            table("persistent definitions (/etc/mdevctl.d)", cols, rows)
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
@click.argument("args", nargs=-1, metavar="[PARENT] [TYPE]", type=MdevCreateArgs())
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
    from . import ops  # the change machinery loads with the commands that change things

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

    report(
        app,
        "mdev-create",
        res.plan,
        data={"instances": [c.to_dict() for c in res.instances], "definitions": res.definitions},
        human=human,
    )


@mdev.command("remove")
@click.argument("uuids", nargs=-1, required=True, metavar="UUID...", type=MDEV_DEVICE)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def remove_cmd(app: App, uuids: tuple[str, ...]) -> None:
    """Remove active instances (refused while a VM holds one; persistent definitions stay)."""
    from . import ops  # the change machinery loads with the commands that change things

    steps = ops.remove(app.env, list(uuids), uri=_libvirt_uri(app))
    removed = [s.split()[1] for s in steps]
    report(app, "mdev-remove", steps, {"removed": removed, "kept_definitions": _kept(app, removed)})


def _kept(app: App, removed: list[str]) -> list[dict[str, str]]:
    """The definitions ``remove``/``stop`` leave (mdevctl's stop: the device is stopped, not undefined);
    an ``auto`` one makes the device again at boot, which is said on stderr (not under --mdevctl)."""
    gone = set(removed)
    kept = [d for d in mdevctl.read_all(app.host)[0] if d.uuid in gone]
    for d in kept:
        if d.start == "auto" and not (mdevctl_output() or app.json):
            click.echo(
                f"vgpukit: note: {d.uuid} stays defined (start auto: it is made again at boot); "
                f"to drop that: vgpukit mdev undefine {d.uuid}",
                err=True,
            )
    return [{"uuid": d.uuid, "parent": d.parent, "start": d.start} for d in kept]


def _libvirt_uri(app: App) -> str | None:
    """The libvirt whose running domains count as users of an mdev (the system one; none on a
    simulated host): the planner reads them as a fact (planner.read(uri=...))."""
    return None if app.is_sim else "qemu:///system"


@mdev.command("stop")
@click.argument("uid", required=False, metavar="[UUID]", type=MDEV_DEVICE)
@uuid_option("The instance to stop (mdevctl's -u).")
@force_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def stop_cmd(app: App, uid: str | None, uuid_opt: str | None, force: bool) -> None:
    """Stop (remove) one active instance, mdevctl's name for 'remove'; its definition stays."""
    from . import ops  # the change machinery loads with the commands that change things

    uid = one_uuid(uid, uuid_opt)
    if not uid:
        raise InvalidInput("which instance? give UUID or -u UUID")
    steps = ops.remove(app.env, [uid], force, uri=_libvirt_uri(app))
    removed = [s.split()[1] for s in steps]
    report(app, "mdev-remove", steps, {"removed": removed, "kept_definitions": _kept(app, removed)})
