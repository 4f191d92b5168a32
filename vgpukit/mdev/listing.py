"""mdevctl 1.2's listings: which devices ``list`` shows (active, or ``--defined``), filtered by UUID and
parent, and mdevctl's own text and ``--dumpjson`` forms of ``list`` and ``types``, byte for byte.

The rules taken from mdevctl (docs/mdev.md has the table):

* active devices show their definition on the same parent (its type, start mode, attributes); one
  without a definition is ``manual``, its attributes from a call-out script's ``get`` event;
* ``--defined`` lists definitions, ``(active)`` when an instance with the same parent and type runs;
* devices are ordered by parent, then UUID; types by name;
* ``--dumpjson``: ``[{PARENT: [{UUID: CONFIG}, ...], ...}]`` (``[]`` when empty); filtered by UUID to
  one device, just its CONFIG (the file format); types: ``[{PARENT: [{TYPE: {available_instances,
  device_api[, name][, description]}}]}]``;
* text: ``UUID PARENT TYPE START`` with `` (defined)`` / `` (active)``, ``-v`` adds the attributes;
  the whole listing is followed by an empty line (mdevctl prints its listing with a newline after it).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ..host import Host
from . import mdevctl, sysfs
from .model import Definition, MdevParent, check_uuid


class Entry(msgspec.Struct, frozen=True):
    device: Definition
    active: bool
    defined: bool


def entries(host: Host, defined: bool, uid: str | None = None, parent: str | None = None) -> list[Entry]:
    """What ``mdevctl list [-d] [-u U] [-p P]`` lists, in its order."""
    want = check_uuid(uid) if uid else None
    defs, _bad = mdevctl.read_all(host)
    insts = sysfs.instances(host, with_holders=False)
    found: list[Entry] = []
    if defined:
        running = {(i.uuid, i.parent, i.type_id) for i in insts}
        for d in defs:
            if want in (None, d.uuid) and parent in (None, d.parent):
                found.append(Entry(d, (d.uuid, d.parent, d.type_id) in running, True))
    else:
        by_key = {(d.uuid, d.parent): d for d in defs}
        for i in insts:
            if want not in (None, i.uuid) or parent not in (None, i.parent):
                continue
            own = by_key.get((i.uuid, i.parent))
            if own is not None:  # as mdevctl: the definition's type, start mode and attributes
                found.append(Entry(own, True, True))
                continue
            from . import callouts  # only for an active device without a definition

            bare = Definition(i.uuid, i.parent, i.type_id)
            attrs = callouts.get_attributes(host, bare, strict=False) or []
            found.append(Entry(Definition(i.uuid, i.parent, i.type_id, attrs=tuple(attrs)), True, False))
    return sorted(found, key=lambda e: (e.device.parent.encode(), e.device.uuid))


def _dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False)


def list_json(found: list[Entry], uid: str | None) -> str:
    """``mdevctl list --dumpjson``."""
    if uid is not None and len(found) <= 1:
        return _dumps(found[0].device.to_mdevctl() if found else [])
    parents: dict[str, list[dict[str, Any]]] = {}
    for e in found:
        parents.setdefault(e.device.parent, []).append({e.device.uuid: e.device.to_mdevctl()})
    return _dumps([parents] if parents else [])


def list_text(found: list[Entry], defined: bool, verbose: bool) -> str:
    """``mdevctl list [-d] [-v]`` (without the newline mdevctl prints after it)."""
    out = []
    for e in found:
        d = e.device
        mark = (" (active)" if e.active else "") if defined else (" (defined)" if e.defined else "")
        out.append(f"{d.uuid} {d.parent} {d.type_id} {d.start}{mark}\n")
        if verbose and d.attrs:
            out.append("  Attrs:\n")
            out += [f'    @{{{n}}}: {{"{k}":"{v}"}}\n' for n, (k, v) in enumerate(d.attrs)]
    return "".join(out)


def _types(parents: list[MdevParent]) -> list[tuple[str, list[dict[str, Any]]]]:
    rows = []
    for p in sorted(parents, key=lambda p: p.name.encode()):
        types = []
        for t in sorted(p.types, key=lambda t: t.type_id.encode()):
            doc: dict[str, Any] = {"type": t.type_id, "available_instances": t.available}
            doc["device_api"] = t.device_api or ""
            if t.name:
                doc["name"] = t.name
            if t.description:
                doc["description"] = ", ".join(t.description.split("\n"))
            types.append(doc)
        rows.append((p.name, types))
    return rows


def types_json(parents: list[MdevParent]) -> str:
    """``mdevctl types --dumpjson``."""
    doc = {name: [{t.pop("type"): t} for t in types] for name, types in _types(parents)}
    return _dumps([doc] if doc else [])


def types_text(parents: list[MdevParent]) -> str:
    """``mdevctl types`` (without the newline mdevctl prints after it)."""
    out = []
    for name, types in _types(parents):
        out.append(f"{name}\n")
        for t in types:
            out.append(f"  {t['type']}\n    Available instances: {t['available_instances']}\n")
            out.append(f"    Device API: {t['device_api']}\n")
            if "name" in t:
                out.append(f"    Name: {t['name']}\n")
            if "description" in t:
                out.append(f"    Description: {t['description']}\n")
    return "".join(out)
