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
from ..inputs import has_control, load_yaml

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


def _text(value: Any, where: str, name: str, most: int) -> str:
    if not isinstance(value, str) or not value or len(value) > most or has_control(value):
        raise InvalidInput(f"{where}: {name} must be a one-line text of 1 to {most} characters")
    return value


def _catalog(value: Any, where: str) -> Catalog:
    keys = ("mnemonic", "gpus", "immediate", "investigatory")
    if not isinstance(value, dict) or set(value) != set(keys):
        raise InvalidInput(f"{where}: nvidia needs exactly {', '.join(keys)}")
    mnemonic = value["mnemonic"]
    if not isinstance(mnemonic, str) or len(mnemonic) > 120 or not _MNEMONIC.fullmatch(mnemonic):
        raise InvalidInput(f"{where}: nvidia.mnemonic must be the catalog's upper-case name (A-Z, 0-9, _)")
    gpus = value["gpus"]
    if not isinstance(gpus, list) or not gpus or any(g not in GPUS for g in gpus) or len(set(gpus)) != len(gpus):
        raise InvalidInput(f"{where}: nvidia.gpus must be a list of distinct names from {', '.join(GPUS)}")
    if value["immediate"] not in IMMEDIATE:
        raise InvalidInput(f"{where}: nvidia.immediate must be one of {', '.join(IMMEDIATE)}")
    investigatory = _text(value["investigatory"], where, "nvidia.investigatory", 80)
    return Catalog(mnemonic, tuple(gpus), value["immediate"], investigatory)


def _entry(value: Any, where: str, version: int) -> XidClass:
    required, optional = {"meaning", "severity", "action"}, {"nvidia", "stricter"} if version >= 2 else set()
    if not isinstance(value, dict) or not required <= set(value) or not set(value) <= required | optional:
        more = " (and optionally nvidia, stricter)" if optional else ""
        raise InvalidInput(f"{where}: needs exactly meaning, severity and action{more}")
    meaning, severity, action = value["meaning"], value["severity"], value["action"]
    if not isinstance(meaning, str) or not meaning or len(meaning) > 200:
        raise InvalidInput(f"{where}: meaning must be a text of 1 to 200 characters")
    if severity not in SEVERITIES:
        raise InvalidInput(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
    if action not in ACTIONS:
        raise InvalidInput(f"{where}: action must be one of {', '.join(ACTIONS)}")
    nvidia = _catalog(value["nvidia"], where) if "nvidia" in value else None
    stricter = _text(value["stricter"], where, "stricter", 200) if "stricter" in value else None
    if stricter is not None and nvidia is None:
        raise InvalidInput(f"{where}: stricter needs the nvidia classification it is stricter than")
    if nvidia is not None:
        expected = catalog_class(nvidia.immediate, nvidia.investigatory)
        if stricter is None and (severity, action) != expected:
            raise InvalidInput(
                f"{where}: nvidia.immediate {nvidia.immediate} gives severity {expected[0]}, action {expected[1]}"
                " (or a stricter one with a `stricter` reason)"
            )
        if stricter is not None and rank(severity, action) <= rank(*expected):
            raise InvalidInput(f"{where}: stricter, but not stricter than {expected[0]}, action {expected[1]}")
    return XidClass(meaning, severity, action, nvidia, stricter)


def _sources(doc: dict[Any, Any], where: str) -> tuple[Source, ...]:
    if doc["version"] == 1:
        if not isinstance(doc["source"], str) or not doc["source"]:
            raise InvalidInput(f"{where}: source must be a non-empty text")
        return (Source(doc["source"], "the whole table"),)
    items = doc["sources"]
    if not isinstance(items, list) or not 0 < len(items) <= MAX_SOURCES:
        raise InvalidInput(f"{where}: sources must be a list of 1 to {MAX_SOURCES} (title, took) mappings")
    out = []
    for item in items:
        if not isinstance(item, dict) or set(item) != {"title", "took"}:
            raise InvalidInput(f"{where}: each source needs exactly title and took")
        out.append(
            Source(_text(item["title"], where, "a source's title", 300), _text(item["took"], where, "took", 600))
        )
    return tuple(out)


def parse(text: str, where: str = "XID table") -> XidTable:
    """A table document; one clear :class:`InvalidInput` line (never quoting the file) when it is not one."""
    return table_of(load_yaml(text, where, max_bytes=MAX_TABLE_BYTES), where)


def table_of(doc: Any, where: str) -> XidTable:
    """The table a parsed document holds (every rule of :func:`parse` but the parsing)."""
    if not isinstance(doc, dict) or type(doc.get("version")) is not int or doc["version"] not in VERSIONS:
        raise InvalidInput(f"{where}: not a mapping with version (1 or 2), date, default, xids and sources")
    keys = ("version", "source" if doc["version"] == 1 else "sources", "date", "default", "xids")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise InvalidInput(f"{where}: missing {', '.join(missing)}")
    if not isinstance(doc["date"], str) or not doc["date"]:
        raise InvalidInput(f"{where}: date must be a non-empty text")
    sources = _sources(doc, where)
    if not isinstance(doc["xids"], dict) or not doc["xids"]:
        raise InvalidInput(f"{where}: xids must be a non-empty mapping of XID numbers")
    version = doc["version"]
    xids = {}
    for key, value in doc["xids"].items():
        if type(key) is not int or not 0 < key <= MAX_XID:
            raise InvalidInput(f"{where}: an XID key is not a number from 1 to {MAX_XID}")
        xids[key] = _entry(value, f"{where}: XID {key}", version)
    default = _entry(doc["default"], f"{where}: default", 1)
    return XidTable(version, sources, doc["date"], default, xids)


def builtin() -> XidTable:
    """The shipped table."""
    from ..data import load_yaml as load_shipped

    # the shipped file is the package's own: parsed by libyaml (the guarded parser of a user's
    # --xid-table takes ~0.15 s on it, paid by every planner that reads the health fact)
    return table_of(load_shipped("xid.yaml"), "vgpukit/data/xid.yaml")
