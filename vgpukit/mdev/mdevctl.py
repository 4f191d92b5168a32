"""Persistent definitions in mdevctl's format, so hosts can switch between mdevctl and vgpukit.

One JSON file per device at ``/etc/mdevctl.d/<parent>/<uuid>``::

    {"mdev_type": "nvidia-232", "start": "auto", "attrs": [{"nvidia/vgpu_params": "..."}]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from ..host import Host
from .model import START_MODES, Definition, check_attr_name, check_parent_name, check_type_id, check_uuid


@dataclass(frozen=True)
class BadFile:
    path: str
    reason: str


def parse(parent: str, uid: str, text: str) -> Definition:
    """A definition from a file's text; InvalidInput when it is not mdevctl's format."""
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("mdev_type"), str):
        raise InvalidInput("no 'mdev_type' string")
    start = doc.get("start", "manual")
    if start not in START_MODES:
        raise InvalidInput(f"'start' must be auto or manual, not {start!r}")
    attrs: list[tuple[str, str]] = []
    for item in doc.get("attrs") or []:
        if not isinstance(item, dict):
            raise InvalidInput("'attrs' must be a list of one-key objects")
        for key, value in item.items():
            attrs.append((check_attr_name(str(key)), str(value)))
    return Definition(
        uuid=check_uuid(uid),
        parent=check_parent_name(parent),
        type_id=check_type_id(doc["mdev_type"]),
        start=start,
        attrs=tuple(attrs),
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
                defs.append(parse(parent, name, host.read(path)))
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
