"""Memory QoS arithmetic of one GPU: who gives memory back, how much, and who is suspended. Pure.

The rules (docs/qos.md, "Memory QoS"):

* only offline tenants give memory back; online tenants' memory is never moved;
* an offline tenant keeps its guarantee (its cap) resident: what it may be asked to move to the host is
  its unified memory beyond the cap (``lendable``), largest lender first, until the shortfall is covered;
* when that is not enough, and the GPU's ``suspend`` is ``checkpoint``, offline tenants are suspended
  whole, the one holding most first, until it is; with ``freeze`` every offline tenant holding memory is
  frozen (it keeps its memory but cannot grow); with ``off`` nothing more happens (the online
  allocation fails when its wait ends);
* when the pressure has been gone for ``restore_ms``, every request is withdrawn (the tenants bring
  their memory back as far as the device keeps the watermark free) and suspended tenants are resumed.
"""

from __future__ import annotations

import msgspec

from .mempolicy import MemoryPolicy


class Holder(msgspec.Struct, frozen=True):
    """What one tenant holds on the GPU (from its shared region) and its state."""

    name: str
    cls: str
    cap: int  # the guarantee
    used: int  # bytes allocated
    evictable: int  # of those, unified memory
    evicted: int  # of those, on the host now
    suspended: bool = False

    @property
    def resident(self) -> int:
        return 0 if self.suspended else max(0, self.used - self.evicted)

    @property
    def lendable(self) -> int:
        """Unified memory on the device beyond the guarantee."""
        if self.suspended or self.cls != "offline":
            return 0
        return max(0, min(self.evictable - self.evicted, self.resident - self.cap))


class Relief(msgspec.Struct, frozen=True):
    evict: dict[str, int]  # tenant -> bytes it should keep on the host (its new request)
    suspend: tuple[str, ...]  # tenants to suspend (checkpoint) or freeze, in order
    freed: int  # bytes the plan frees on the device


def relieve(policy: MemoryPolicy, holders: list[Holder], shortfall: int) -> Relief:
    """How ``shortfall`` bytes are freed for the online tenants."""
    remaining = shortfall
    evict: dict[str, int] = {}
    for h in sorted(holders, key=lambda h: (-h.lendable, h.name)):
        if remaining <= 0 or h.lendable <= 0:
            break
        take = min(h.lendable, remaining)
        evict[h.name] = h.evicted + take
        remaining -= take
    suspend: list[str] = []
    if remaining > 0 and policy.suspend != "off":
        candidates = sorted(
            (h for h in holders if h.cls == "offline" and not h.suspended and h.resident > 0),
            key=lambda h: (-h.resident, h.name),
        )
        for h in candidates:
            if policy.suspend == "checkpoint" and remaining <= 0:
                break
            suspend.append(h.name)
            if policy.suspend == "checkpoint":
                remaining -= h.resident - (evict.get(h.name, h.evicted) - h.evicted)
    return Relief(evict, tuple(suspend), shortfall - max(0, remaining))


def quiet(policy: MemoryPolicy, last_pressure_ns: int | None, online_busy: bool, now: int) -> bool:
    """Has the pressure been gone long enough to give the memory back?"""
    if last_pressure_ns is None:
        return False
    return not online_busy and now - last_pressure_ns >= policy.restore_ms * 1_000_000
