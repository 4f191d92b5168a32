"""The health layer's views for a watch (:mod:`vgpukit.watch`): a look whenever the devices may have changed.

* ``health``: every watched device's health (the record kept current, as ``vgpukit health`` does, when
  ``save``); ``sick``: the unusable ones (BDFs and MIG device UUIDs -> why), what the doors withhold.

A look reads NVML's events as every look does, from the record's cursor (the simulated driver hands
over what came since), plus the events the watch's own event set delivered that no later look could
ask for: a real driver's event set sees only what comes after it is created (those events have no
``seq``). Without the watch's, a long-running door on a real host would never see an XID.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..nvml.model import Nvml, NvmlEvent
from ..watch.model import Refresh, View, view
from . import check, fact, xid
from . import log as record_log
from .log import Record
from .model import DEFAULT_WINDOW, HealthEvent

DEVICES = ("pci", "docs", "nvml")  # kinds of change after which a device's health may differ


class Seen:
    """An event watcher for one look: the driver's events since the record's cursor, and ``seen``
    (those the watch's event set delivered) that have no ``seq`` to be asked for again."""

    def __init__(self, nvml: Nvml, record: Record, seen: list[NvmlEvent]) -> None:
        self.own = nvml.watch_events(dict(record.cursor))
        self.seen = [e for e in seen if not e.seq]

    def wait(self, timeout: float) -> list[NvmlEvent]:
        out, self.seen = self.own.wait(0) + self.seen, []
        return out

    def close(self) -> None:
        self.own.close()


def look(
    r: Refresh,
    table: xid.XidTable,
    save: bool,
    window: float = DEFAULT_WINDOW,
    seen: list[NvmlEvent] | None = None,
    keeper: record_log.Keeper | None = None,
) -> check.Look:
    """One look over the refresh's PCI snapshot; the record saved when ``save`` (through ``keeper``: in
    memory while the file cannot take it, docs/health.md, "The health record")."""
    keeper = keeper or record_log.Keeper()
    record = keeper.load(r.host)
    watcher = Seen(r.nvml, record, r.nvml_events if seen is None else seen) if r.nvml is not None else None
    try:
        found = check.look(r.host, r.nvml, table, record, watcher=watcher, window=window, scan=r.scan)
    finally:
        if watcher is not None:
            watcher.close()
    if save:
        keeper.save(r.host, record)
    return found


def health_views(
    save: bool,
    table: xid.XidTable | None = None,
    window: float = DEFAULT_WINDOW,
    new_events: Callable[[list[HealthEvent]], None] | None = None,
    keeper: record_log.Keeper | None = None,
) -> dict[str, View]:
    """``new_events``: told of each look's new events (``health --watch`` streams them); ``keeper``: the
    process's health record (one per process: kept in memory while the file cannot take it)."""
    xids = table or xid.builtin()
    kept = keeper or record_log.Keeper()

    def health(r: Refresh) -> list[Any]:
        found = look(r, xids, save, window, keeper=kept)
        if new_events is not None and found.new_events:
            new_events(found.new_events)
        return found.devices

    def sick(r: Refresh) -> dict[str, str]:
        devices = r.value("health") or []
        return {**fact.unusable(devices), **fact.unusable_slices(devices)}

    return {"health": view(health, *DEVICES), "sick": view(sick, *DEVICES)}
