"""Memory QoS of one GPU at run time: pressure in, eviction requests and suspensions out.

The protocol with libvgpukit-cuda (docs/cuda.md, "Memory QoS"): an online tenant's library sends
``need BYTES`` when the device refused an allocation (and repeats it while it waits), or ``low BYTES``
when the device's free memory fell under the watermark; the daemon decides (:mod:`vgpukit.qos.memory`)
and writes each chosen offline tenant's request file (``memreq``: seq, bytes to keep on the host); the
tenant's processes move their unified memory and acknowledge the seq in their region slots, then send
``moved SEQ``. One round of requests is in flight at a time: a ``need`` that arrives meanwhile only marks
the pressure, one sent before the last round ended is stale (the memory it asked for was freed since),
and one that arrives after the round ended means the round was not enough: the next round escalates.
Everything the daemon knows of a tenant's memory is read from its region, so a tenant killed at any
point leaves nothing behind here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..cuda import region
from ..errors import NoCapacity, Unsupported, VgpukitError
from ..host import Host
from ..logs import logger
from . import checkpoint, memory
from .model import Gpu
from .stats import Samples

log = logger("vgpukit.qos")
ROUND_TIMEOUT_NS = 5_000_000_000  # a tenant that has not complied by then is given up on for this round


@dataclass
class Suspension:
    how: str  # checkpoint | freeze
    pids: tuple[int, ...]
    bytes: int


@dataclass
class Hooks:
    """What the GPU's runtime lets memory QoS do to the time-slice enforcement."""

    running: Callable[[str, bool], None]  # keep the tenant thawed (True) while its processes move memory
    held: Callable[[str, bool], None]  # keep the tenant frozen (True) whatever the scheduler says


@dataclass
class GpuMemory:
    key: str
    host: Host
    seq: dict[str, int] = field(default_factory=dict)
    asked: dict[str, int] = field(default_factory=dict)  # tenant -> bytes it was asked to keep on the host
    waiting: dict[str, int] = field(default_factory=dict)  # tenant -> seq not acknowledged yet
    round_start: int | None = None
    round_done: int = 0
    pressure_at: int | None = None
    pending: tuple[str, int, int] | None = None  # a need that came during the round: (kind, bytes, sent)
    retried_at: int = 0  # when memory still on the host was last asked back
    suspended: dict[str, Suspension] = field(default_factory=dict)
    latency: Samples = field(default_factory=Samples)  # request written -> every process complied
    rounds: int = 0
    suspensions: int = 0
    checkpointer: checkpoint.Checkpointer | None = None

    # ------------------------------------------------------------ facts
    def usage(self, name: str) -> region.Usage | None:
        try:
            return region.read_usage(self.host, name)
        except VgpukitError:
            return None

    def holders(self, spec: Gpu) -> list[memory.Holder]:
        out = []
        for t in spec.tenants:
            u = self.usage(t.name)
            if u is None:
                continue
            out.append(
                memory.Holder(
                    t.name,
                    t.cls,
                    t.memory or 0,
                    sum(u.used),
                    sum(u.evictable),
                    sum(u.evicted),
                    t.name in self.suspended,
                )
            )
        return out

    # ------------------------------------------------------------ pressure
    def pressure(self, spec: Gpu, kind: str, shortfall: int, sent_ns: int | None, now: int, hooks: Hooks) -> None:
        """An online tenant's ``need`` (its allocation was refused) or ``low`` (under the watermark)."""
        self.pressure_at = now
        if sent_ns is not None and sent_ns < self.round_done:
            return  # asked before the last round ended: the memory it asked for was freed since
        if self.waiting:  # after this round, if it was asked after the round began
            if self.round_start is not None and (sent_ns or now) >= self.round_start:
                self.pending = (kind, shortfall, sent_ns or now)
            return
        want = shortfall + (spec.memory.watermark if kind == "need" else 0)
        relief = memory.relieve(spec.memory, self.holders(spec), want)
        for name, keep in relief.evict.items():
            self._request(name, keep, hooks)
        if self.waiting:
            self.round_start = now
            self.rounds += 1
        for name in relief.suspend:
            self._suspend(spec, name, hooks)

    def _request(self, name: str, keep: int, hooks: Hooks) -> None:
        seq = max(self.seq.get(name, 0), region.read_request(self.host, name)[0]) + 1
        try:
            region.write_request(self.host, name, seq, keep)
        except VgpukitError as err:
            log.error("%s: cannot ask tenant %s for memory: %s", self.key, name, err)
            return
        self.seq[name] = seq
        self.asked[name] = keep
        self.waiting[name] = seq
        hooks.running(name, True)  # a frozen process cannot move its memory

    def check(self, now: int, hooks: Hooks, spec: Gpu | None = None) -> None:
        """Which tenants complied (every live process acknowledged its request)."""
        for name, seq in list(self.waiting.items()):
            u = self.usage(name)
            late = self.round_start is not None and now - self.round_start > ROUND_TIMEOUT_NS
            if u is None or all(a >= seq for a in u.acks) or late:
                if late and u is not None and not all(a >= seq for a in u.acks):
                    log.warning("%s: tenant %s did not move its memory in time", self.key, name)
                del self.waiting[name]
                hooks.running(name, False)
        if not self.waiting and self.round_start is not None:
            self.latency.add((now - self.round_start) / 1e9)
            self.round_start = None
            self.round_done = now
            pending, self.pending = self.pending, None
            if pending is not None and spec is not None:
                self.round_done = pending[2]  # the pending need itself is not stale
                self.pressure(spec, pending[0], pending[1], pending[2], now, hooks)

    # ------------------------------------------------------------ suspension
    def _suspend(self, spec: Gpu, name: str, hooks: Hooks) -> None:
        u = self.usage(name)
        if u is None or name in self.suspended:
            return
        how = spec.memory.suspend
        if how == "checkpoint":
            try:
                self.checkpointer = self.checkpointer or checkpoint.find(self.host)
            except Unsupported as err:
                log.warning("%s: %s; freezing tenant %s instead (it keeps its memory)", self.key, err, name)
                how = "freeze"
        if how == "checkpoint":
            assert self.checkpointer is not None
            hooks.running(name, True)
            done: list[int] = []
            try:
                for pid in u.pids:
                    self.checkpointer.suspend(pid)
                    done.append(pid)
            except VgpukitError as err:
                log.error("%s: cannot checkpoint tenant %s: %s; freezing it instead", self.key, name, err)
                for pid in done:
                    try:
                        self.checkpointer.resume(pid)
                    except VgpukitError:
                        pass
                how = "freeze"
            hooks.running(name, False)
        if how == "freeze":
            hooks.held(name, True)
        self.suspended[name] = Suspension(how, u.pids, u.resident)
        self.suspensions += 1
        log.info("%s: tenant %s suspended (%s, %d bytes)", self.key, name, how, u.resident)

    def _resume(self, name: str, hooks: Hooks) -> bool:
        s = self.suspended[name]
        if s.how == "checkpoint" and self.checkpointer is not None:
            hooks.running(name, True)
            try:
                for pid in s.pids:
                    self.checkpointer.resume(pid)
            except NoCapacity:
                return False  # not yet: the next tick tries again
            except VgpukitError as err:
                log.error("%s: cannot restore tenant %s: %s", self.key, name, err)
            finally:
                hooks.running(name, False)
        else:
            hooks.held(name, False)
        del self.suspended[name]
        log.info("%s: tenant %s resumed", self.key, name)
        return True

    # ------------------------------------------------------------ the end of pressure
    def tick(self, spec: Gpu, now: int, online_busy: bool, hooks: Hooks) -> None:
        self.check(now, hooks, spec)
        if self.waiting:
            return
        if self.pressure_at is None and now - self.retried_at >= spec.memory.restore_ms * 1_000_000:
            self.retried_at = now  # memory that did not fit back when it was released: ask again
            for t in spec.tenants:
                u = self.usage(t.name) if t.cls == "offline" else None
                if u is not None and u.moved_out and not self.asked.get(t.name):
                    self._request(t.name, 0, hooks)
            if self.waiting:
                self.round_start = now
            return
        if not memory.quiet(spec.memory, self.pressure_at, online_busy, now):
            return
        for name in sorted(self.suspended, key=lambda n: self.suspended[n].bytes):
            if not self._resume(name, hooks):
                return
        for name in [n for n, keep in self.asked.items() if keep]:
            self._request(name, 0, hooks)
            del self.asked[name]
        if self.waiting:
            self.round_start = now
        self.pressure_at = None

    def forget(self, name: str) -> None:
        for d in (self.seq, self.asked, self.waiting):
            d.pop(name, None)
        self.suspended.pop(name, None)

    def recover(self, spec: Gpu, hooks: Hooks) -> None:
        """For each tenant seen for the first time (at start, or added since): the requests and checkpoints
        a previous daemon left are withdrawn and undone."""
        for t in spec.tenants:
            if t.name in self.seq:
                continue
            seq, keep = region.read_request(self.host, t.name)
            self.seq[t.name] = seq
            if keep:
                self._request(t.name, 0, hooks)
            u = self.usage(t.name)
            if u is None or not spec.memory_qos:
                continue
            try:
                cp = self.checkpointer or checkpoint.find(self.host)
                for pid in u.pids:
                    if cp.state(pid) != "running":
                        cp.resume(pid)
                        log.warning("%s: resumed tenant %s's process %d left suspended", self.key, t.name, pid)
            except VgpukitError:
                continue

    # ------------------------------------------------------------ reporting
    def status(self, name: str) -> dict[str, Any]:
        u = self.usage(name)
        s = self.suspended.get(name)
        return {
            "memory_resident": 0 if u is None or (s is not None and s.how == "checkpoint") else u.resident,
            "memory_evicted": 0 if u is None else u.moved_out,
            "memory_suspended": 0 if s is None or s.how != "checkpoint" else s.bytes,
            "memory_state": "suspended"
            if s is not None
            else "evicted"
            if u is not None and u.moved_out
            else "resident",
        }

    def summary(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "suspensions": self.suspensions,
            "in_flight": sorted(self.waiting),
            "eviction": self.latency.summary(),
        }
