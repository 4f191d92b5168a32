"""The health record: a small bounded log of recent events and what was last seen of each device,
kept in ``/run/vgpukit/health/state.json`` (through the host door, written atomically).

``/run`` is emptied at boot, as the facts it holds (event cursors, IOMMU groups, AER totals) are
true only until then. Two writers at once (a ``health --watch`` and a one-shot ``health``): the last
one's file wins, each a whole valid file; an event both saw is recorded by both, at most once each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

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
        """The file's text: sorted keys, one item a line (msgspec's encoder: a 1,024-VF host's record in about
        1 ms, where the standard library's indenting encoder, pure Python, takes 15); the same JSON value as
        ``json.dumps(..., indent=1, sort_keys=True)`` (tests/health/test_record_keeper.py)."""
        doc = {"version": 1, "cursor": {str(k): v for k, v in self.cursor.items()}, "events": self.events}
        raw = msgspec.json.encode({**doc, "pci": self.pci}, order="sorted")
        return msgspec.json.format(raw, indent=1).decode() + "\n"

    def copy(self) -> Record:
        """A record a look may change without changing this one (a look replaces what it changes of a
        device's facts, never edits them in place: two levels are copied)."""
        return Record(dict(self.cursor), list(self.events), {bdf: dict(v) for bdf, v in self.pci.items()})


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
    return parse(host, host.read_opt(host.health_record()))


def parse(host: Host, text: str | None) -> Record:
    """The record of the file's ``text`` (None: there is none)."""
    path = host.health_record()
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


def save(host: Host, record: Record, text: str | None = None) -> str:
    """Write the record unless the file holds it already; its text (``text``: known already)."""
    path = host.health_record()
    text = record.to_json() if text is None else text
    if host.read_raw_opt(path) == text:
        return text  # nothing new: a poller looking every second writes nothing
    host.mkdir(path.parent)
    host.write_file(path, text)
    return text


class Keeper:
    """The health record of one process: read from the file, written back after each look. A write that
    fails (a full, read-only or failing /run: :class:`~vgpukit.errors.StorageFault`) never stops the
    look: the record is kept in memory and used for the next look (event cursors, AER totals, what was
    seen), :attr:`note` says so once, and the file is written again once it can be (docs/health.md,
    "The health record").

    Between two looks the keeper holds the record it last read or wrote with that file's text: a look
    whose file still holds that text (no other writer since: a one-shot ``vgpukit health``) takes a copy
    of it instead of parsing the file again, and a record that did not change is not encoded again. What
    a look gets equals a fresh read of the file (tests/health/test_record_keeper.py)."""

    def __init__(self, lasting: bool = True, warn: bool = True) -> None:
        self.memory: Record | None = None  # the record the file could not take, None while it can
        self.note: str | None = None  # the line saying so, set at the first failure (and again after a recovery)
        self.lasting = lasting  # a long-running look (the device plugin, health --watch), not one look
        self.warn = warn  # log the note as a warning when it is set (else the caller shows it: :meth:`news`)
        self._told = True
        # the file's text as last read or written (as read_opt gives it), its record, its text as written
        self.kept: tuple[str, Record, str | None] | None = None

    def load(self, host: Host) -> Record:
        if self.memory is not None:
            return self.memory
        text = host.read_opt(host.health_record())
        if self.kept is not None and text == self.kept[0]:
            return self.kept[1].copy()
        record = parse(host, text)
        self.kept = (text, record.copy(), None) if text is not None else None
        return record

    def news(self) -> str | None:
        """The note, the first time it is asked for after it was set (a front end prints it once)."""
        if self._told:
            return None
        self._told = True
        return self.note

    def save(self, host: Host, record: Record) -> None:
        kept = self.kept
        try:
            text = save(host, record, kept[2] if kept is not None and kept[1] == record else None)
            self.kept = (text.strip(), record.copy(), text)
        except StorageFault as err:
            self.kept = None
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
