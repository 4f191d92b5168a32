"""Persistent definitions in mdevctl's format, so hosts can switch between mdevctl and vgpukit.

One JSON file per device at ``/etc/mdevctl.d/<parent>/<uuid>``::

    {"mdev_type": "nvidia-232", "start": "auto", "attrs": [{"nvidia/vgpu_params": "..."}]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput, OutsideRoot
from ..host import Host
from ..inputs import check_text, load_json
from .model import START_MODES, Definition, check_attr_name, check_parent_name, check_type_id, check_uuid

MAX_DEFINITION_BYTES = 64 * 1024


@dataclass(frozen=True)
class BadFile:
    path: str
    reason: str


def parse(parent: str, uid: str, text: str) -> Definition:
    """A definition from a file's text; InvalidInput when it is not mdevctl's format. Messages
    say what is wrong, never the file's content."""
    doc: Any = load_json(text, "definition", max_bytes=MAX_DEFINITION_BYTES)
    if not isinstance(doc, dict) or not isinstance(doc.get("mdev_type"), str):
        raise InvalidInput("no 'mdev_type' string")
    start = doc.get("start", "manual")
    if not isinstance(start, str) or start not in START_MODES:
        raise InvalidInput("'start' must be auto or manual")
    attrs: list[tuple[str, str]] = []
    for item in doc.get("attrs") or []:
        if not isinstance(item, dict):
            raise InvalidInput("'attrs' must be a list of one-key objects")
        for key, value in item.items():
            if not isinstance(value, str | int) or isinstance(value, bool):
                raise InvalidInput("an attribute value must be a string or an integer")
            try:
                name = check_attr_name(str(key))
            except InvalidInput:
                raise InvalidInput("invalid attribute name: expected e.g. nvidia/vgpu_params") from None
            attrs.append((name, check_text(str(value), "an attribute value", allow_empty=True)))
    try:
        type_id = check_type_id(doc["mdev_type"])
    except InvalidInput:
        raise InvalidInput("invalid 'mdev_type': expected e.g. mtty-2 or nvidia-232") from None
    return Definition(
        uuid=check_uuid(uid), parent=check_parent_name(parent), type_id=type_id, start=start, attrs=tuple(attrs)
    )


def read_all(host: Host) -> tuple[list[Definition], list[BadFile]]:
    """Every definition under /etc/mdevctl.d, and the files that could not be read as one."""
    defs: list[Definition] = []
    bad: list[BadFile] = []
    base = host.etc("mdevctl.d")
    for parent in host.listdir(base):
        if not host.is_dir(base / parent):
            continue
        for name in host.listdir(base / parent):
            if name.startswith("."):
                continue  # editor/atomic-write temporaries
            path = base / parent / name
            try:
                text = host.read_doc(path, "mdevctl definition", MAX_DEFINITION_BYTES)
                defs.append(parse(parent, name, text or ""))
            except OutsideRoot:
                raise
            except InvalidInput as err:
                bad.append(BadFile(host.display(path), err.message))
    return defs, bad


def find(host: Host, uid: str) -> Definition | None:
    return next((d for d in read_all(host)[0] if d.uuid == uid), None)


def path_of(host: Host, d: Definition) -> str:
    return host.display(host.etc("mdevctl.d", d.parent, d.uuid))


def text_of(d: Definition) -> str:
    """The file mdevctl writes for ``d``."""
    return json.dumps(d.to_mdevctl(), indent=2) + "\n"


def write(host: Host, d: Definition) -> None:
    host.write_file(host.etc("mdevctl.d", d.parent, d.uuid), text_of(d))


def delete(host: Host, d: Definition) -> None:
    host.remove(host.etc("mdevctl.d", d.parent, d.uuid))
