"""The XID classification: what an XID means for its device, as data (``vgpukit/data/xid.yaml``).

A version 2 table records, per XID, what NVIDIA's Xid catalog says of it (``nvidia``: mnemonic, the
GPUs it applies to, the immediate and investigatory resolution buckets), and its severity and action
then follow from the catalog by one mapping (:func:`catalog_class`, docs/health.md "The XID table"),
or are stricter than it with a reason (``stricter``). The loader refuses a row that claims the
catalog's bucket and is classified otherwise, so the table cannot drift from its source.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..errors import InvalidInput
from ..inputs import at, has_control, load_yaml_located, where_in

SEVERITIES = ("info", "degraded", "unusable")  # in order: the worst of several wins
ACTIONS = ("none", "restart-app", "recreate-vfs", "reset", "drain", "reboot", "replace")
VERSIONS = (1, 2)  # 2: per-row `nvidia` and `stricter`, `sources` instead of `source`
MAX_XID = 65535
MAX_TABLE_BYTES = 256 * 1024
MAX_SOURCES = 20
GPUS = ("A100", "H100", "B100", "GB200")  # the catalog's "Applies to" columns

# The catalog's immediate-action bucket -> (severity, action); RESTART_APP is decided by
# catalog_class. A bucket not here (those of B100/GB200-only XIDs) is refused until classified.
BUCKETS: dict[str, tuple[str, str]] = {
    "IGNORE": ("info", "none"),
    "WORKFLOW_XID_45": ("info", "none"),  # alone: a fabric manager restart; else follow the other XID
    "RESTART_VM": ("degraded", "restart-app"),  # the application being the VM that owns the GPU
    "UPDATE_SWFW": ("degraded", "none"),
    "CHECK_MECHANICALS": ("degraded", "drain"),
    "RESET_GPU": ("unusable", "reset"),
    "WORKFLOW_XID_48": ("unusable", "reset"),
    "WORKFLOW_NVLINK_ERR": ("unusable", "reset"),
    "XID_154": ("unusable", "reset"),
    "RESTART_BM": ("unusable", "reboot"),
}
RESTART_APP = "RESTART_APP"
# Investigatory buckets that put the fault on the application: RESTART_APP with one is `info`.
APPLICATION_CHECKS = frozenset({"CHECK_APP/CUDA", "WORKFLOW_XID_13", "WORKFLOW_XID_31"})
IMMEDIATE = (*BUCKETS, RESTART_APP)
_MNEMONIC = re.compile(r"[A-Z][A-Z0-9_]*( / [A-Z][A-Z0-9_]*)*")


def catalog_class(immediate: str, investigatory: str) -> tuple[str, str]:
    """(severity, action) that NVIDIA's resolution buckets give an XID (docs/health.md)."""
    if immediate == RESTART_APP:
        return ("info" if investigatory in APPLICATION_CHECKS else "degraded"), "restart-app"
    return BUCKETS[immediate]


def rank(severity: str, action: str) -> tuple[int, int]:
    """Order of (severity, action): the worst is the largest."""
    return SEVERITIES.index(severity), ACTIONS.index(action)


class Catalog(msgspec.Struct, frozen=True):
    """What NVIDIA's Xid catalog says of one XID."""

    mnemonic: str
    gpus: tuple[str, ...]
    immediate: str
    investigatory: str


class XidClass(msgspec.Struct, frozen=True):
    meaning: str
    severity: str
    action: str
    nvidia: Catalog | None = None
    stricter: str | None = None  # why the row is stricter than catalog_class says


class Source(msgspec.Struct, frozen=True):
    title: str
    took: str  # what the table took from it


class XidTable(msgspec.Struct, frozen=True):
    version: int
    sources: tuple[Source, ...]
    date: str
    default: XidClass
    xids: dict[int, XidClass]

    def classify(self, xid: int) -> XidClass:
        """The XID's class; the table's default for one it does not list."""
        return self.xids.get(xid, self.default)


def _refused(text: str, *path: Any) -> InvalidInput:
    """A refusal of the value at ``path`` (``$.xids.79.severity: expected ...``), noted (:func:`at`) so the
    reader of a file can say its line and column (an XID is a mapping key: ``.79``, a list index ``[0]``)."""
    shown = "".join(
        f"[{p}]" if isinstance(p, int) and path[i - 1 : i] != ("xids",) else f".{p}" for i, p in enumerate(path)
    )
    return at(InvalidInput(f"${shown}: {text}"), *path)


def _text(value: Any, most: int, *path: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > most or has_control(value):
        raise _refused(f"expected a one-line text of 1 to {most} characters", *path)
    return value


def _catalog(value: Any, *path: Any) -> Catalog:
    keys = ("mnemonic", "gpus", "immediate", "investigatory")
    if not isinstance(value, dict) or set(value) != set(keys):
        raise _refused(f"expected exactly {', '.join(keys)}", *path)
    mnemonic = value["mnemonic"]
    if not isinstance(mnemonic, str) or len(mnemonic) > 120 or not _MNEMONIC.fullmatch(mnemonic):
        raise _refused("expected the catalog's upper-case name (A-Z, 0-9, _)", *path, "mnemonic")
    gpus = value["gpus"]
    if not isinstance(gpus, list) or not gpus or any(g not in GPUS for g in gpus) or len(set(gpus)) != len(gpus):
        raise _refused(f"expected a list of distinct names from {', '.join(GPUS)}", *path, "gpus")
    if value["immediate"] not in IMMEDIATE:
        raise _refused(f"expected one of {', '.join(IMMEDIATE)}", *path, "immediate")
    investigatory = _text(value["investigatory"], 80, *path, "investigatory")
    return Catalog(mnemonic, tuple(gpus), value["immediate"], investigatory)


def _entry(value: Any, version: int, *path: Any) -> XidClass:
    required, optional = {"meaning", "severity", "action"}, {"nvidia", "stricter"} if version >= 2 else set()
    if not isinstance(value, dict) or not required <= set(value) or not set(value) <= required | optional:
        more = " (and optionally nvidia, stricter)" if optional else ""
        raise _refused(f"needs exactly meaning, severity and action{more}", *path)
    meaning, severity, action = value["meaning"], value["severity"], value["action"]
    if not isinstance(meaning, str) or not meaning or len(meaning) > 200:
        raise _refused("expected a text of 1 to 200 characters", *path, "meaning")
    if severity not in SEVERITIES:
        raise _refused(f"expected one of {', '.join(SEVERITIES)}", *path, "severity")
    if action not in ACTIONS:
        raise _refused(f"expected one of {', '.join(ACTIONS)}", *path, "action")
    nvidia = _catalog(value["nvidia"], *path, "nvidia") if "nvidia" in value else None
    stricter = _text(value["stricter"], 200, *path, "stricter") if "stricter" in value else None
    if stricter is not None and nvidia is None:
        raise _refused("stricter needs the nvidia classification it is stricter than", *path, "stricter")
    if nvidia is not None:
        expected = catalog_class(nvidia.immediate, nvidia.investigatory)
        if stricter is None and (severity, action) != expected:
            raise _refused(
                f"nvidia.immediate {nvidia.immediate} gives severity {expected[0]}, action {expected[1]}"
                " (or a stricter one with a `stricter` reason)",
                *path,
                "severity",
            )
        if stricter is not None and rank(severity, action) <= rank(*expected):
            raise _refused(f"stricter, but not stricter than {expected[0]}, action {expected[1]}", *path, "stricter")
    return XidClass(meaning, severity, action, nvidia, stricter)


def _sources(doc: dict[Any, Any]) -> tuple[Source, ...]:
    if doc["version"] == 1:
        if not isinstance(doc["source"], str) or not doc["source"]:
            raise _refused("expected a non-empty text", "source")
        return (Source(doc["source"], "the whole table"),)
    items = doc["sources"]
    if not isinstance(items, list) or not 0 < len(items) <= MAX_SOURCES:
        raise _refused(f"expected a list of 1 to {MAX_SOURCES} (title, took) mappings", "sources")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or set(item) != {"title", "took"}:
            raise _refused("needs exactly title and took", "sources", i)
        out.append(
            Source(_text(item["title"], 300, "sources", i, "title"), _text(item["took"], 600, "sources", i, "took"))
        )
    return tuple(out)


def _date(value: Any) -> str:
    """The table's date: a text (the loader reads ``date: 2026-11-27`` unquoted as the text it is written
    as, docs/health.md)."""
    if isinstance(value, str):
        return _text(value, 64, "date")
    raise _refused("expected a date (2026-11-27, quoted or not) or a one-line text", "date")


def parse(text: str, where: str = "XID table") -> XidTable:
    """A table document; one clear :class:`InvalidInput` line (never quoting the file) when it is not one:
    ``WHERE:LINE:COLUMN: $.xids.79.severity: expected one of ...`` (the place of the value at fault, as every
    YAML file vgpukit reads says it); a key written twice is refused."""
    doc, places = load_yaml_located(text, where, max_bytes=MAX_TABLE_BYTES, unique=True)
    try:
        return table_of(doc)
    except InvalidInput as err:
        raise InvalidInput(f"{places.describe(where, where_in(err))}: {err}") from None


def table_of(doc: Any) -> XidTable:
    """The table a parsed document holds (every rule of :func:`parse` but the parsing); a refusal names the
    value's path (``$.xids.79.severity: ...``), noted for :func:`parse` to place it."""
    if not isinstance(doc, dict):
        raise _refused("expected a mapping with version (1 or 2), date, sources, default and xids")
    if type(doc.get("version")) is not int or doc["version"] not in VERSIONS:
        raise _refused("expected 1 or 2", "version") if "version" in doc else _refused("missing version")
    keys = ("version", "source" if doc["version"] == 1 else "sources", "date", "default", "xids")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise _refused(f"missing {', '.join(missing)}")
    for key in doc:
        if key not in keys:  # placed at the key itself, not quoted (file content)
            raise at(InvalidInput(f"$: unknown field (allowed: {', '.join(keys)})"), key, "<key>")
    date = _date(doc["date"])
    sources = _sources(doc)
    if not isinstance(doc["xids"], dict) or not doc["xids"]:
        raise _refused("expected a non-empty mapping of XID numbers", "xids")
    version = doc["version"]
    xids = {}
    for key, value in doc["xids"].items():
        if type(key) is not int or not 0 < key <= MAX_XID:
            raise at(InvalidInput(f"$.xids: a key is not an XID number from 1 to {MAX_XID}"), "xids", key, "<key>")
        xids[key] = _entry(value, version, "xids", key)
    default = _entry(doc["default"], 1, "default")
    return XidTable(version, sources, date, default, xids)


def builtin() -> XidTable:
    """The shipped table."""
    from ..data import load_yaml as load_shipped

    # the shipped file is the package's own: parsed by libyaml (the guarded parser of a user's
    # --xid-table takes ~0.15 s on it, paid by every planner that reads the health fact)
    try:
        return table_of(load_shipped("xid.yaml"))
    except InvalidInput as err:
        raise InvalidInput(f"vgpukit/data/xid.yaml: {err}") from None
