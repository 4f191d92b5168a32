"""``vgpukit health [DEVICE] [--watch]``: each device's health, its recent events, the action to take."""

from __future__ import annotations

import json
import queue
import signal
import time
from collections.abc import Callable
from pathlib import Path

import click
import msgspec

from ..clikit.context import App
from ..clikit.options import json_option
from ..clikit.output import emit, json_doc, say, table
from ..clikit.params import AsciiFloat, DeviceName
from ..clikit.watch import resync_option
from ..errors import NotFound
from ..naming import PCI, resolve
from . import check, xid
from . import log as record_log
from .model import DEFAULT_WINDOW, DeviceHealth, HealthEvent, exit_code

SHOWN_EVENTS = 10  # recent events listed under the table (--json: all a device has)


def _table(app: App, path: Path | None) -> xid.XidTable:
    if path is None:
        return xid.builtin()
    text = app.host.read_doc(path, "XID table", xid.MAX_TABLE_BYTES, user_file=True)
    assert text is not None
    return xid.parse(text, str(path))


def _select(app: App, device: str | None, devices: list[DeviceHealth]) -> list[DeviceHealth]:
    if device is None:
        return devices
    bdf = resolve(app.host, device, frozenset({PCI}), nvml=lambda: app.nvml).bdf
    chosen = [d for d in devices if d.bdf == bdf]
    if not chosen:
        raise NotFound(
            f"{device} is not a device the health layer watches",
            hint="GPUs, their VFs, vfio-pci devices, SR-IOV PFs with VFs",
        )
    return chosen


def _carved(app: App, devices: list[DeviceHealth]) -> list[DeviceHealth]:
    """A VF of an unusable PF is shown unusable, ``carved from PF: why`` (as every door refuses it and
    the Kubernetes plugins list it); its own causes stay its own (the policy acts on the PF)."""
    from msgspec.structs import replace

    from ..quarantine import parent_of
    from .fact import unusable

    sick = unusable(devices)
    if not sick:
        return devices
    out = []
    for d in devices:
        pf = parent_of(app.host, d.bdf) if d.kind == "vf" and d.state != "unusable" else None
        if pf in sick:
            name = next((p.device for p in devices if p.bdf == pf), pf)
            d = replace(d, state="unusable", reasons=(f"carved from {name}: {sick[pf]}", *d.reasons))
        out.append(d)
    return out


def _look(app: App, keeper: record_log.Keeper, table: xid.XidTable, window: float) -> check.Look:
    record = keeper.load(app.host)
    found = check.look(app.host, app.nvml, table, record, window=window)
    keeper.save(app.host, record)
    _warn(keeper)
    return found


def _warn(keeper: record_log.Keeper) -> None:
    """The record could not be written: said once on stderr (the look is reported all the same)."""
    note = keeper.news()
    if note:
        click.echo(f"vgpukit: warning: {note}", err=True)


def _render(devices: list[DeviceHealth], remedy: list[str] | None = None) -> None:
    rows = []
    for d in devices:
        rows.append([d.device, d.bdf, d.state, d.action, "; ".join(d.reasons)])
        rows += [[f"  {d.device} GI {s.gi}", d.bdf, s.state, s.action, "; ".join(s.reasons)] for s in d.slices]
    table(None, ["DEVICE", "BDF", "STATE", "ACTION", "REASONS"], rows)
    repairs = dict.fromkeys(d.repair for d in devices if d.repair)  # one line per command, in device order
    if repairs:
        say("")
        for line in repairs:
            say(f"repair: {line}")
    recent = sorted((e for d in devices for e in d.events), key=lambda e: e.time)[-SHOWN_EVENTS:]
    if recent:
        say("")
        say("recent events:")
        for e in recent:
            say(f"  {_stamp(e.time)}  {e.line()}")
    if remedy:
        say("")
        say("remediation:")
        for line in remedy:
            say(line)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _stream(app: App, e: HealthEvent) -> None:
    if app.json:
        click.echo(json.dumps(json_doc("health-event", msgspec.to_builtins(e)), separators=(",", ":")))  # JSON lines
    else:
        click.echo(f"{_stamp(e.time)}  {e.line()}")


@click.command("health")
@click.argument("device", required=False, type=DeviceName("pci", "gpu"))
@click.option("--watch", is_flag=True, help="Stream events as they come (one line each) until interrupted.")
@click.option(
    "--for", "seconds", type=AsciiFloat(0, 31536000), metavar="SECONDS", help="With --watch: stop after SECONDS."
)
@click.option(
    "--window",
    type=AsciiFloat(0, 31536000),
    default=DEFAULT_WINDOW,
    show_default=True,
    metavar="SECONDS",
    help="How long an event counts toward its device's state.",
)
@click.option(
    "--xid-table", "xid_table", type=click.Path(dir_okay=False, path_type=Path), help="Another XID table (YAML)."
)
@resync_option
@json_option
@click.pass_context
def health(
    ctx: click.Context,
    device: str | None,
    watch: bool,
    seconds: float | None,
    window: float,
    xid_table: Path | None,
    resync: float,
) -> None:
    """Each device's health (GPUs, their VFs, vfio-pci devices, SR-IOV PFs), its recent events, the action to take.

    Exit 0 all healthy, 1 one degraded, 4 one unusable. States, events, XIDs: docs/health.md.
    """
    app: App = ctx.obj
    table = _table(app, xid_table)
    keeper = record_log.Keeper(lasting=watch, warn=False)  # a record it cannot write: one warning, no failure
    record = keeper.load(app.host)
    found = check.look(app.host, app.nvml, table, record, window=window)
    devices = _select(app, device, _carved(app, found.devices))  # a name it does not watch: refused
    keeper.save(app.host, record)
    _warn(keeper)
    if not watch:
        from .. import remedies as view  # quarantined devices and this boot's remediations (docs/health.md)

        cure = view.section(app.host, {d.bdf for d in devices} if device is not None else None)
        doc = {"devices": [d.as_dict() for d in devices], "window": window, "remediation": cure}
        emit(app, "health", doc, lambda: _render(devices, view.lines(cure)))
        ctx.exit(exit_code(devices))
    chosen = {d.bdf for d in devices} if device is not None else None

    def show(e: HealthEvent) -> None:
        if chosen is None or e.bdf in chosen:
            _stream(app, e)

    for e in found.new_events:  # what came since the last look, first
        show(e)
    found = _follow(app, keeper, table, window, resync, None if seconds is None else time.monotonic() + seconds, show)
    ctx.exit(exit_code(_select(app, device, found.devices)))


def _follow(
    app: App,
    keeper: record_log.Keeper,
    table: xid.XidTable,
    window: float,
    resync: float,
    end: float | None,
    show: Callable[[HealthEvent], None],
) -> check.Look:
    """Stream each look's new events until ``end`` (or an interrupt): a look whenever the watch says the
    devices may have changed (kernel uevents, NVML events, a committed change; docs/engine.md, "The
    watch"), none on a timer but the safety net's. The last look, made at the end, is returned."""
    from ..clikit.watch import start_watch
    from ..stopping import Stop
    from .watched import health_views

    came: queue.SimpleQueue[list[HealthEvent]] = queue.SimpleQueue()
    # an interrupt ends the stream (the stop idiom: vgpukit/stopping.py); SIGTERM keeps its default action
    stop = Stop().on_signals(signal.SIGINT)
    stop.then(lambda: came.put([]))  # the queue's wait wakes (SimpleQueue.put: safe from anywhere)
    watch = start_watch(app, health_views(True, table, window, came.put, keeper), resync)
    try:
        while (end is None or time.monotonic() < end) and not stop.is_set():
            try:
                events = came.get(timeout=None if end is None else max(0.0, end - time.monotonic()))
            except queue.Empty:
                break
            for e in events:
                show(e)
            _warn(keeper)  # the record could not be written: said once
    finally:
        watch.close()
        stop.restore()
    while not came.empty():
        for e in came.get():
            show(e)
    found = _look(app, keeper, table, window)  # the devices' state at the end (and what came at the last moment)
    for e in found.new_events:
        show(e)
    return found
