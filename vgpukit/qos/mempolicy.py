"""The memory QoS policy of one GPU (docs/qos.md, "Memory QoS"): a record, validated, no I/O.

Per class: online tenants' memory is plain device memory and comes first (never moved, never
suspended); offline tenants may hold a burst of unified memory beyond their cap, which the daemon asks
them to move to the host when an online tenant needs the room, and, as the last resort, are
suspended (``suspend``). What the daemon does with these settings is :mod:`vgpukit.qos.memory`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..errors import InvalidInput
from ..inputs import parse_size

SUSPENDS = ("off", "freeze", "checkpoint")
KEYS = ("watermark", "suspend", "restore_ms", "reclaim_ms")
MAX_MS = 3_600_000


class MemoryPolicy(msgspec.Struct, frozen=True):
    watermark: int = 0  # bytes the GPU keeps free for online tenants (0: only refused allocations count)
    suspend: str = "off"  # the last resort for offline tenants: off | freeze (keeps memory) | checkpoint
    restore_ms: int = 1000  # pressure gone this long: offline tenants get their memory back
    reclaim_ms: int = 10000  # how long an online tenant's refused allocation waits for memory

    @property
    def default(self) -> bool:
        return self == MemoryPolicy()

    def validate(self, key: str) -> MemoryPolicy:
        if not isinstance(self.suspend, str) or self.suspend not in SUSPENDS:
            raise InvalidInput(f"{key}: memory suspend must be one of {', '.join(SUSPENDS)}")
        for what, value, lo, hi in (
            ("watermark", self.watermark, 0, 1 << 50),
            ("restore_ms", self.restore_ms, 0, MAX_MS),
            ("reclaim_ms", self.reclaim_ms, 0, MAX_MS),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise InvalidInput(f"{key}: memory {what} must be an integer {lo}..{hi}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)

    def replace(self, changes: dict[str, Any]) -> MemoryPolicy:
        doc = {**self.to_dict(), **{k: v for k, v in changes.items() if v is not None}}
        return MemoryPolicy.from_dict("memory", doc)

    @classmethod
    def from_dict(cls, key: str, doc: Any) -> MemoryPolicy:
        """The policy of a document whose keys are KEYS (the caller refuses others, naming them)."""
        if doc is None:
            return cls()
        if not isinstance(doc, dict):
            raise InvalidInput(f"{key}: memory must be a mapping ({', '.join(KEYS)})")
        if set(doc) - set(KEYS):
            raise InvalidInput(f"{key}: memory: unknown keys")
        wm = doc.get("watermark", 0)
        return cls(
            watermark=parse_size(wm, f"{key}: memory watermark") if isinstance(wm, str) else wm,
            suspend=doc.get("suspend", "off"),
            restore_ms=doc.get("restore_ms", 1000),
            reclaim_ms=doc.get("reclaim_ms", 10000),
        ).validate(key)
