"""The scheduler of one GPU: pure arithmetic, no I/O, driven by the caller's clock.

The device runs one tenant at a time (a GPU time-slices contexts; the daemon makes the slices
exact). Every call takes ``now`` in integer nanoseconds; nothing here reads a clock, so tests drive
it with a fake one and the daemon with ``time.monotonic_ns``.

* Which class: online tenants with work (and, under fixed-share, with credit) preempt offline ones
  at once; offline tenants run in whatever online leaves.
* Within a class, weighted fair queueing on *virtual time* (service received / weight): the
  eligible tenant with the least virtual time gets the next slice. Weights are equal under
  best-effort and the shares under burst-share, so idle capacity is lent in proportion to the
  shares of the busy tenants. A tenant that becomes busy starts at the class's current virtual
  time, so it gets its share back at the next slice without a catch-up burst.
* fixed-share adds a credit per tenant: it grows at ``share`` of real time (capped at one slice while
  the tenant is idle, so idleness is never banked, and at three slices while it is busy, so that an
  overrun by a late wake-up is still owed) and shrinks by the time the tenant holds the device. Only tenants with
  positive credit are eligible, so a tenant never exceeds its share, even on an idle GPU; overshoot
  of a late wake-up becomes debt and is paid back, so the long-run share is exact.

Idle tenants are never frozen (they use nothing and must be able to report new work); busy
tenants that do not hold the device are frozen.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

NS_PER_MS = 1_000_000
# A busy tenant kept off the device by others' overrun (a late daemon wake-up) may be owed up to
# this many slices; an idle tenant banks at most one slice. Bounds the burst to 3 slices.
BUSY_CAP_SLICES = 3


@dataclass(eq=False)  # identity: compared on every decision
class TenantState:
    name: str
    cls: str
    share: int
    busy: bool = False
    vtime: float = 0.0  # ns of service / weight
    credit: float = 0.0  # ns (fixed-share only)
    served_ns: int = 0
    preemptions: int = 0
    last_grant: int = -1  # round-robin tie break: least recently granted first


class Decision(msgspec.Struct, frozen=True):
    granted: str | None  # the tenant that holds the device now
    frozen: frozenset[str]  # busy tenants that must not run
    next_at: int | None  # call decide() again at this time (ns) even without events
    preempted: tuple[str, ...] = ()  # lost the device to an online tenant in this decision


@dataclass
class Scheduler:
    policy: str
    slice_ns: int
    now: int = 0
    tenants: dict[str, TenantState] = field(default_factory=dict)
    granted: str | None = None
    grant_end: int = 0

    @classmethod
    def create(cls, policy: str, slice_ms: int, tenants: Iterable[tuple[str, str, int]], now: int) -> Scheduler:
        sched = cls(policy=policy, slice_ns=slice_ms * NS_PER_MS, now=now)
        sched.configure(policy, slice_ms, tenants, now)
        return sched

    # ------------------------------------------------------------------ changes
    def configure(self, policy: str, slice_ms: int, tenants: Iterable[tuple[str, str, int]], now: int) -> None:
        """Apply a new policy / tenant set; surviving tenants keep their demand and history."""
        self._charge(now)
        self.policy = policy
        self.slice_ns = slice_ms * NS_PER_MS
        new: dict[str, TenantState] = {}
        for name, cls, share in tenants:
            old = self.tenants.get(name)
            if old is None:
                new[name] = TenantState(name, cls, share, credit=float(self.slice_ns), vtime=self._class_vtime(cls))
            else:
                old.cls, old.share = cls, share
                new[name] = old
        self.tenants = new
        if self.granted not in new:
            self.granted = None

    def set_busy(self, name: str, busy: bool, now: int) -> bool:
        """Record a tenant's demand. Returns whether it changed (then call :meth:`decide`)."""
        t = self.tenants.get(name)
        if t is None or t.busy == busy:
            return False
        self._charge(now)
        if busy:
            t.vtime = max(t.vtime, self._class_vtime(t.cls, exclude=name))
        t.busy = busy
        return True

    # ------------------------------------------------------------------ decisions
    def decide(self, now: int) -> Decision:
        self._charge(now)
        eligible = self._eligible("online") or self._eligible("offline")
        cur = self.tenants.get(self.granted) if self.granted else None
        preempted: tuple[str, ...] = ()
        if cur is not None and cur in eligible and now < self.grant_end:
            pass  # keep the slice
        else:
            if cur is not None and cur.busy and cur.cls == "offline" and eligible and eligible[0].cls == "online":
                cur.preemptions += 1
                preempted = (cur.name,)
            if eligible:
                best = min(eligible, key=lambda t: (t.vtime, t.last_grant, t.name))
                if best is not cur:
                    best.last_grant = now
                self.granted = best.name
                self.grant_end = now + self.slice_ns
            else:
                self.granted = None
        frozen = frozenset(t.name for t in self.tenants.values() if t.busy and t.name != self.granted)
        return Decision(self.granted, frozen, self._next_at(now), preempted)

    def _eligible(self, cls: str) -> list[TenantState]:
        fixed = self.policy == "fixed-share"
        return [t for t in self.tenants.values() if t.busy and t.cls == cls and (not fixed or t.credit > 0)]

    def _next_at(self, now: int) -> int | None:
        times = [self.grant_end] if self.granted else []
        if self.policy == "fixed-share":
            for t in self.tenants.values():
                if t.busy and t.credit <= 0 and t.name != self.granted:
                    times.append(now + int(-t.credit * 100 / t.share) + 1)
        return max(min(times), now) if times else None

    # ------------------------------------------------------------------ accounting
    def weight(self, t: TenantState) -> float:
        return 1.0 if self.policy == "best-effort" else float(t.share)

    def _class_vtime(self, cls: str, exclude: str | None = None) -> float:
        busy = [t.vtime for t in self.tenants.values() if t.busy and t.cls == cls and t.name != exclude]
        return min(busy) if busy else 0.0

    def _charge(self, now: int) -> None:
        dt = now - self.now
        if dt <= 0:
            return
        self.now = now
        cur = self.tenants.get(self.granted) if self.granted else None
        if cur is not None and cur.busy:
            cur.served_ns += dt
            cur.vtime += dt / self.weight(cur)
            cur.credit -= dt
        if self.policy == "fixed-share":
            idle_cap = float(self.slice_ns)
            busy_cap = float(self.slice_ns * BUSY_CAP_SLICES)
            for t in self.tenants.values():
                t.credit = min(t.credit + t.share * dt / 100.0, busy_cap if t.busy else idle_cap)
