"""The health record: a small bounded log of recent events and what was last seen of each device,
kept in ``/run/vgpukit/health/state.json`` (through the host door, written atomically).

``/run`` is emptied at boot, as the facts it holds (event cursors, IOMMU groups, AER totals) are
true only until then. Two writers at once (a ``health --watch`` and a one-shot ``health``): the last
one's file wins, each a whole valid file; an event both saw is recorded by both, at most once each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInput, StorageFault
from ..host import Host
from ..inputs import load_json
from ..logs import logger

log = logger("vgpukit.health")
MAX_EVENTS = 256  # the oldest go first
MAX_BYTES = 1 << 20


@dataclass
class Record:
    cursor: dict[int, int] = field(default_factory=dict)  # NVML index -> last event seq taken
    events: list[dict[str, Any]] = field(default_factory=list)  # {time, device, bdf, kind, data}
    pci: dict[str, dict[str, Any]] = field(default_factory=dict)  # bdf -> {group, numvfs, aer{}, gone}

    def add(self, events: list[dict[str, Any]]) -> None:
        self.events = (self.events + events)[-MAX_EVENTS:]

    def to_json(self) -> str:
        doc = {"version": 1, "cursor": {str(k): v for k, v in self.cursor.items()}, "events": self.events}
        return json.dumps({**doc, "pci": self.pci}, indent=1, sort_keys=True) + "\n"


def _valid(doc: Any) -> Record | None:
    if not isinstance(doc, dict) or doc.get("version") != 1:
        return None
    cursor, events, pci = doc.get("cursor"), doc.get("events"), doc.get("pci")
    if not (isinstance(cursor, dict) and isinstance(events, list) and isinstance(pci, dict)):
        return None
    if not all(k.isdigit() and type(v) is int for k, v in cursor.items()):
        return None
    keys: dict[str, Any] = {"time": (int, float), "device": str, "bdf": str, "kind": str, "data": int}
    for e in events:
        if not isinstance(e, dict) or not all(isinstance(e.get(k), t) for k, t in keys.items()):
            return None
        if type(e.get("gi", -1)) is not int:  # the MIG slice of an XID (optional)
            return None
    if not all(isinstance(v, dict) for v in pci.values()):
        return None
    return Record({int(k): v for k, v in cursor.items()}, events[-MAX_EVENTS:], pci)


def load(host: Host) -> Record:
    """The record; an empty one when there is none, or (with a warning) when it is not one."""
    path = host.health_record()
    text = host.read_opt(path)
    if text is None:
        return Record()
    try:
        record = _valid(load_json(text, "health record", max_bytes=MAX_BYTES))
    except InvalidInput:
        record = None
    if record is None:
        log.warning("the health record %s is not one: starting a new one", host.display(path))
        return Record()
    return record


def save(host: Host, record: Record) -> None:
    path = host.health_record()
    text = record.to_json()
    if host.read_raw_opt(path) == text:
        return  # nothing new: a poller looking every second writes nothing
    host.mkdir(path.parent)
    host.write_file(path, text)


class Keeper:
    """The health record of one process: read from the file, written back after each look. A write that
    fails (a full, read-only or failing /run: :class:`~vgpukit.errors.StorageFault`) never stops the
    look: the record is kept in memory and used for the next look (event cursors, AER totals, what was
    seen), :attr:`note` says so once, and the file is written again once it can be (docs/health.md,
    "The health record")."""

    def __init__(self, lasting: bool = True, warn: bool = True) -> None:
        self.memory: Record | None = None  # the record the file could not take, None while it can
        self.note: str | None = None  # the line saying so, set at the first failure (and again after a recovery)
        self.lasting = lasting  # a long-running look (the device plugin, health --watch), not one look
        self.warn = warn  # log the note as a warning when it is set (else the caller shows it: :meth:`news`)
        self._told = True

    def load(self, host: Host) -> Record:
        return self.memory if self.memory is not None else load(host)

    def news(self) -> str | None:
        """The note, the first time it is asked for after it was set (a front end prints it once)."""
        if self._told:
            return None
        self._told = True
        return self.note

    def save(self, host: Host, record: Record) -> None:
        try:
            save(host, record)
        except StorageFault as err:
            first = self.memory is None
            self.memory = record
            if first:
                then = (
                    "health is kept in memory until the record can be written again"
                    if self.lasting
                    else "this look was not recorded (its events are reported again by the next one)"
                )
                self.note, self._told = f"{err.message}: {then}", False
                if self.warn:
                    log.warning("%s", self.note)
            return
        if self.memory is not None:
            self.memory = None
            log.info("the health record %s is written again", host.display(host.health_record()))
