"""The memory QoS policy of one GPU (docs/qos.md, "Memory QoS"): a record, validated, no I/O.

Per class: online tenants' memory is plain device memory and comes first (never moved, never
suspended); offline tenants may hold a burst of unified memory beyond their cap, which the daemon asks
them to move to the host when an online tenant needs the room, and, as the last resort, are
suspended (``suspend``). What the daemon does with these settings is :mod:`vgpukit.qos.memory`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..declared import convert
from ..inputs import parse_size
from .document import MAX_MS, SUSPENDS, MemoryDoc

KEYS = tuple(MemoryDoc.__struct_fields__)
__all__ = ["KEYS", "MAX_MS", "SUSPENDS", "MemoryPolicy"]


class MemoryPolicy(msgspec.Struct, frozen=True):
    watermark: int = 0  # bytes the GPU keeps free for online tenants (0: only refused allocations count)
    suspend: str = "off"  # the last resort for offline tenants: off | freeze (keeps memory) | checkpoint
    restore_ms: int = 1000  # pressure gone this long: offline tenants get their memory back
    reclaim_ms: int = 10000  # how long an online tenant's refused allocation waits for memory

    @property
    def default(self) -> bool:
        return self == MemoryPolicy()

    def validate(self, key: str) -> MemoryPolicy:
        """The policy as its declaration (:class:`~vgpukit.qos.document.MemoryDoc`) has it."""
        convert(self.to_dict(), MemoryDoc, f"{key}: memory")
        return self

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)

    def replace(self, changes: dict[str, Any]) -> MemoryPolicy:
        doc = {**self.to_dict(), **{k: v for k, v in changes.items() if v is not None}}
        return MemoryPolicy.from_dict("memory", doc)

    @classmethod
    def from_dict(cls, key: str, doc: Any) -> MemoryPolicy:
        return cls.of(key, convert(doc, MemoryDoc | None, f"{key}: memory"))

    @classmethod
    def of(cls, key: str, doc: MemoryDoc | None) -> MemoryPolicy:
        """The policy a declared document describes (None: the defaults)."""
        if doc is None:
            return cls()
        wm = doc.watermark
        return cls(
            watermark=parse_size(wm, f"{key}: memory watermark") if isinstance(wm, str) else wm,
            suspend=doc.suspend,
            restore_ms=doc.restore_ms,
            reclaim_ms=doc.reclaim_ms,
        ).validate(key)
