"""The XID classification: what an XID means for its device, as data (``vgpukit/data/xid.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from ..inputs import load_yaml

SEVERITIES = ("info", "degraded", "unusable")  # in order: the worst of several wins
ACTIONS = ("none", "restart-app", "reset", "drain", "reboot", "replace")
MAX_XID = 65535
MAX_TABLE_BYTES = 256 * 1024


@dataclass(frozen=True)
class XidClass:
    meaning: str
    severity: str
    action: str


@dataclass(frozen=True)
class XidTable:
    version: int
    source: str
    date: str
    default: XidClass
    xids: dict[int, XidClass]

    def classify(self, xid: int) -> XidClass:
        """The XID's class; the table's default for one it does not list."""
        return self.xids.get(xid, self.default)


def _entry(value: Any, where: str) -> XidClass:
    if not isinstance(value, dict) or set(value) != {"meaning", "severity", "action"}:
        raise InvalidInput(f"{where}: needs exactly meaning, severity and action")
    meaning, severity, action = value["meaning"], value["severity"], value["action"]
    if not isinstance(meaning, str) or not meaning or len(meaning) > 200:
        raise InvalidInput(f"{where}: meaning must be a text of 1 to 200 characters")
    if severity not in SEVERITIES:
        raise InvalidInput(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
    if action not in ACTIONS:
        raise InvalidInput(f"{where}: action must be one of {', '.join(ACTIONS)}")
    return XidClass(meaning, severity, action)


def parse(text: str, where: str = "XID table") -> XidTable:
    """A table document; one clear :class:`InvalidInput` line (never quoting the file) when it is not one."""
    doc = load_yaml(text, where, max_bytes=MAX_TABLE_BYTES)
    if not isinstance(doc, dict):
        raise InvalidInput(f"{where}: not a mapping with version, source, date, default and xids")
    missing = [k for k in ("version", "source", "date", "default", "xids") if k not in doc]
    if missing:
        raise InvalidInput(f"{where}: missing {', '.join(missing)}")
    if type(doc["version"]) is not int or doc["version"] != 1:
        raise InvalidInput(f"{where}: version must be 1")
    for key in ("source", "date"):
        if not isinstance(doc[key], str) or not doc[key]:
            raise InvalidInput(f"{where}: {key} must be a non-empty text")
    if not isinstance(doc["xids"], dict) or not doc["xids"]:
        raise InvalidInput(f"{where}: xids must be a non-empty mapping of XID numbers")
    xids = {}
    for key, value in doc["xids"].items():
        if type(key) is not int or not 0 < key <= MAX_XID:
            raise InvalidInput(f"{where}: an XID key is not a number from 1 to {MAX_XID}")
        xids[key] = _entry(value, f"{where}: XID {key}")
    return XidTable(doc["version"], doc["source"], doc["date"], _entry(doc["default"], f"{where}: default"), xids)


def builtin() -> XidTable:
    """The shipped table."""
    from ..data import DATA_DIR

    return parse((DATA_DIR / "xid.yaml").read_text(), "vgpukit/data/xid.yaml")
