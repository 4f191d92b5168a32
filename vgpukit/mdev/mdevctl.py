"""Persistent definitions in mdevctl's format, so hosts can switch between mdevctl and vgpukit.

One JSON file per device at ``/etc/mdevctl.d/<parent>/<uuid>``::

    {"mdev_type": "nvidia-232", "start": "auto", "attrs": [{"nvidia/vgpu_params": "..."}]}

Coexistence with mdevctl's own tree (see docs/mdev.md):

* ``/etc/mdevctl.d/scripts.d`` (mdevctl's ``callouts/`` and ``notifiers/``) is not a parent;
* only regular files whose names are UUIDs are definitions (directories and the like are skipped);
  a UUID-named file matches whatever the case of its name (mdevctl writes lower case, as we do);
* a file that is not a valid definition (not JSON, nested too deep, too large, an attribute naming a
  control file...) is skipped and reported, never fatal for the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from ..errors import InvalidInput, OutsideRoot, VgpukitError
from ..host import Host
from ..inputs import check_text, load_json
from .model import START_MODES, Definition, check_attr_name, check_parent_name, check_type_id, check_uuid

SCRIPTS_DIR = "scripts.d"  # mdevctl's callouts and notifiers live here: not a parent
MAX_DEFINITION_BYTES = 64 * 1024
MAX_ATTR_VALUE = 4096


class BadFile(msgspec.Struct, frozen=True):
    path: str
    reason: str


def parse(parent: str, uid: str, text: str, where: str = "definition") -> Definition:
    """A definition from a file's text; InvalidInput when it is not mdevctl's format."""
    doc: Any = load_json(text, where, max_bytes=MAX_DEFINITION_BYTES)
    if not isinstance(doc, dict) or not isinstance(doc.get("mdev_type"), str):
        raise InvalidInput(f"{where}: no 'mdev_type' string")
    try:
        type_id = check_type_id(doc["mdev_type"])
    except InvalidInput:
        raise InvalidInput(f"{where}: 'mdev_type' is not a valid type id") from None
    start = doc.get("start", "manual")
    if start not in START_MODES:
        raise InvalidInput(f"{where}: 'start' must be auto or manual")
    return Definition(
        uuid=check_uuid(uid),
        parent=check_parent_name(parent),
        type_id=type_id,
        start=start,
        attrs=tuple(parse_attrs(doc.get("attrs"), where)),
    )


def parse_attrs(items: object, where: str) -> list[tuple[str, str]]:
    """mdevctl's ``attrs``: a list of one-key objects (null or absent: none)."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise InvalidInput(f"{where}: 'attrs' must be a list of one-key objects")
    attrs: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, dict) or len(item) != 1:
            raise InvalidInput(f"{where}: 'attrs' must be a list of one-key objects")
        for key, value in item.items():
            try:
                attrs.append((check_attr_name(key), attr_value(value)))
            except InvalidInput as err:
                raise InvalidInput(f"{where}: {err.message}") from None
    return attrs


def attr_value(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidInput("an attribute value is not a string")
    return check_text(str(value), "an attribute value", max_len=MAX_ATTR_VALUE, allow_empty=True)


def _files(host: Host) -> list[tuple[str, str, Path]]:
    """(parent, file name, path) of every regular file one level below /etc/mdevctl.d's parent dirs."""
    base = host.mdevctl_dir()
    found = []
    for parent in host.listdir(base):
        if parent == SCRIPTS_DIR or parent.startswith(".") or not host.is_dir(base / parent):
            continue
        for name in host.listdir(base / parent):
            path = base / parent / name
            if name.startswith(".") or not host.is_file(path):
                continue  # editor/atomic-write temporaries, directories, sockets...
            found.append((parent, name, path))
    return found


def _uuid_of(name: str) -> str | None:
    try:
        return check_uuid(name)
    except InvalidInput:
        return None


def read_all(host: Host) -> tuple[list[Definition], list[BadFile]]:
    """Every definition under /etc/mdevctl.d, and the files that could not be read as one."""
    defs: list[Definition] = []
    bad: list[BadFile] = []
    for parent, name, path in _files(host):
        shown = host.display(path)
        if _uuid_of(name) is None:
            bad.append(BadFile(shown, "not a definition: the file name is not a UUID"))
            continue
        try:
            text = host.read_doc(path, "mdevctl definition", MAX_DEFINITION_BYTES)
            defs.append(parse(parent, name, text or "", where=shown))
        except OutsideRoot:
            raise  # a planted link out of the root is refused, not listed as a bad file
        except InvalidInput as err:
            bad.append(BadFile(shown, err.message.removeprefix(f"{shown}: ")))
        except VgpukitError as err:  # unreadable (permissions, I/O): report it, keep the others
            bad.append(BadFile(shown, err.message))
    return defs, bad


def files_of(host: Host, uid: str) -> list[Path]:
    """The definition files of ``uid`` (any parent, any case of the file name), valid or not."""
    want = check_uuid(uid)
    return [path for _, name, path in _files(host) if _uuid_of(name) == want]


def bad_file_of(host: Host, uid: str) -> BadFile | None:
    """Why the definition file of ``uid`` could not be read, when there is one and it is bad."""
    shown = {host.display(p) for p in files_of(host, uid)}
    return next((b for b in read_all(host)[1] if b.path in shown), None)


def find(host: Host, uid: str) -> Definition | None:
    want = check_uuid(uid)
    return next((d for d in read_all(host)[0] if d.uuid == want), None)


def matching(host: Host, uid: str, parent: str | None = None) -> list[Definition]:
    """Every valid definition of ``uid`` (on ``parent`` only, when given)."""
    want = check_uuid(uid)
    return [d for d in read_all(host)[0] if d.uuid == want and parent in (None, d.parent)]


def path_of(host: Host, d: Definition) -> str:
    """Where ``d`` lives: its existing file (whatever the case of its name), else the lower-case name."""
    for path in files_of(host, d.uuid):
        if path.parent.name == d.parent:
            return host.display(path)
    return host.display(host.mdevctl_dir(d.parent, d.uuid))


def text_of(d: Definition) -> str:
    """The file mdevctl writes for ``d``, byte for byte: serde_json's pretty form (two-space indent,
    keys in the order mdev_type, start, attrs, non-ASCII characters as they are) and no newline at the
    end (docs/mdev.md, "Byte-identical files"). Files with a final newline are read all the same."""
    import json

    return json.dumps(d.to_mdevctl(), indent=2, ensure_ascii=False)
