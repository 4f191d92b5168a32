"""One GPU at run time: its scheduler, the tenants' backends, enforcement and accounting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..errors import NotFound, VgpukitError
from ..logs import logger
from .backends import Backend
from .memruntime import GpuMemory, Hooks
from .model import Gpu, Tenant
from .policy import Decision, Scheduler
from .stats import Samples, ShareWindows

log = logger("vgpukit.qos")
S = 1_000_000_000


class Observer(Protocol):
    def detection(self, gpu: str, tenant: str, cls: str, seconds: float) -> None: ...

    def enforcement(self, gpu: str, tenant: str, cls: str, action: str, seconds: float) -> None: ...

    def preemption(self, gpu: str, tenant: str, cls: str, seconds: float) -> None: ...


class NullObserver:
    def detection(self, gpu: str, tenant: str, cls: str, seconds: float) -> None:
        pass

    def enforcement(self, gpu: str, tenant: str, cls: str, action: str, seconds: float) -> None:
        pass

    def preemption(self, gpu: str, tenant: str, cls: str, seconds: float) -> None:
        pass


class GpuRuntime:
    def __init__(
        self,
        spec: Gpu,
        backends: dict[str, Backend],
        clock: Callable[[], int],
        observer: Observer | None = None,
    ) -> None:
        now = clock()
        self.clock = clock
        self.spec = spec
        self.backends = backends
        self.obs: Observer = observer or NullObserver()
        self.sched = Scheduler.create(spec.policy, spec.slice_ms, self._params(spec), now)
        self.frozen: set[str] = set()
        self.frozen_since: dict[str, int] = {}
        self.frozen_total: dict[str, int] = {}
        self.thawed_at: dict[str, int] = {}
        self.windows = ShareWindows(now)
        self.last_step = now
        self.granted: str | None = None
        self.next_at: int | None = None
        self.detection = Samples()
        self.enforcement = Samples()
        self.preemption = Samples()
        self.timer = Samples()  # how late the daemon woke for this GPU's slice boundaries
        self.notified_at: dict[str, int] = {}  # last accepted demand datagram per tenant
        self.memory: GpuMemory | None = None  # memory QoS (the daemon attaches it)
        self.moving: set[str] = set()  # memory QoS: not frozen while their processes move memory
        self.held: set[str] = set()  # memory QoS: frozen whatever the scheduler says (suspended by freeze)
        self.hooks = Hooks(running=self._keep_running, held=self._hold)

    def _keep_running(self, name: str, on: bool) -> None:
        (self.moving.add if on else self.moving.discard)(name)
        self.step(self.clock())

    def _hold(self, name: str, on: bool) -> None:
        (self.held.add if on else self.held.discard)(name)
        self.step(self.clock())

    def online_busy(self) -> bool:
        return any(t.busy and t.cls == "online" for t in self.sched.tenants.values())

    @staticmethod
    def _params(spec: Gpu) -> list[tuple[str, str, int]]:
        return [(t.name, t.cls, t.share) for t in spec.tenants]

    def cls_of(self, name: str) -> str:
        t = self.sched.tenants.get(name)
        return t.cls if t else "offline"

    # ------------------------------------------------------------ changes
    def reconfigure(self, spec: Gpu, backends: dict[str, Backend]) -> list[str]:
        """New policy/tenants; removed tenants are thawed first. Returns vanished tenants."""
        now = self.clock()
        self._account(now)
        gone = [n for n in self.backends if n not in backends]
        old = {t.name: t.target for t in self.spec.tenants}
        for t in spec.tenants:
            if old.get(t.name) != t.target:  # another cgroup/process/domain: it must notify anew
                self.notified_at.pop(t.name, None)
        vanished = []
        for name in gone:
            self.moving.discard(name)
            self.held.discard(name)
            if self.memory is not None:
                self.memory.forget(name)
            if name in self.frozen:
                try:
                    self._thaw(name, self.backends[name], now)
                except VgpukitError:
                    pass
            self.windows.drop(name)
            self.frozen_total.pop(name, None)
            self.notified_at.pop(name, None)
        self.spec = spec
        self.backends = backends
        self.sched.configure(spec.policy, spec.slice_ms, self._params(spec), now)
        vanished += self.step(now)
        return vanished

    def demand(self, name: str, busy: bool, now: int, sent_ns: int | None) -> list[str]:
        if sent_ns is not None and busy:
            lat = max(0, now - sent_ns) / S
            self.detection.add(lat)
            self.obs.detection(self.spec.key, name, self.cls_of(name), lat)
        if self.sched.set_busy(name, busy, now):
            return self.step(now, trigger_ns=sent_ns if busy else None)
        return []

    def notified(self, name: str, now: int) -> None:
        self.notified_at[name] = now

    def sampled(self, t: Tenant) -> bool:
        """Is the tenant's demand read from its CPU time right now (sample, or auto before notifying)?"""
        return t.demand == "sample" or (t.demand == "auto" and t.name not in self.notified_at)

    def demand_source(self, t: Tenant) -> str:
        """How the tenant's demand is known: sampled, notified, auto-sampled, auto-notified, or waiting
        (notify only, and nothing received yet: it is never scheduled until it notifies)."""
        if t.demand == "sample":
            return "sampled"
        seen = t.name in self.notified_at
        if t.demand == "auto":
            return "auto-notified" if seen else "auto-sampled"
        return "notified" if seen else "waiting"

    # ------------------------------------------------------------ enforcement
    def step(self, now: int, trigger_ns: int | None = None) -> list[str]:
        """Decide and enforce. Returns tenants whose cgroup/processes/domain vanished."""
        self._account(now)
        d: Decision = self.sched.decide(now)
        self.granted = d.granted
        self.next_at = d.next_at
        vanished: list[str] = []
        want = (d.frozen - self.moving) | (self.held & set(self.backends))
        to_freeze = sorted(want - self.frozen)
        to_thaw = sorted(self.frozen - want)
        # Preemption by online work: freeze first, the online tenant must not share the device.
        # A slice rotation within a class: thaw the next holder first, so the device does not idle
        # for the freeze + thaw + wake-up time at every switch (the old holder stops microseconds later).
        if d.preempted:
            self._enforce("freeze", to_freeze, now, vanished)
            if trigger_ns is not None:
                lat = max(0, self.clock() - trigger_ns) / S
                self.preemption.add(lat)
                for name in d.preempted:
                    self.obs.preemption(self.spec.key, name, self.cls_of(name), lat)
            self._enforce("thaw", to_thaw, now, vanished)
        else:
            self._enforce("thaw", to_thaw, now, vanished)
            self._enforce("freeze", to_freeze, now, vanished)
        return vanished

    def _enforce(self, action: str, names: list[str], now: int, vanished: list[str]) -> None:
        for name in names:
            try:
                if action == "freeze":
                    self._freeze(name, self.backends[name], now)
                else:
                    self._thaw(name, self.backends[name], now)
            except NotFound as err:
                log.warning("%s: tenant %s vanished: %s", self.spec.key, name, err)
                vanished.append(name)
            except VgpukitError as err:
                log.error("%s: cannot %s %s: %s", self.spec.key, action, name, err)

    def _freeze(self, name: str, backend: Backend, now: int) -> None:
        t0 = self.clock()
        backend.freeze()
        lat = (self.clock() - t0) / S
        self.enforcement.add(lat)
        self.obs.enforcement(self.spec.key, name, self.cls_of(name), "freeze", lat)
        self.frozen.add(name)
        self.frozen_since[name] = now

    def _thaw(self, name: str, backend: Backend, now: int) -> None:
        self.frozen.discard(name)
        self.thawed_at[name] = now
        since = self.frozen_since.pop(name, now)
        self.frozen_total[name] = self.frozen_total.get(name, 0) + max(0, now - since)
        t0 = self.clock()
        backend.thaw()
        lat = (self.clock() - t0) / S
        self.enforcement.add(lat)
        self.obs.enforcement(self.spec.key, name, self.cls_of(name), "thaw", lat)

    def thaw_everything(self) -> None:
        now = self.clock()
        for name in sorted(self.frozen):
            try:
                self._thaw(name, self.backends[name], now)
            except VgpukitError as err:
                log.warning("%s: thaw %s: %s", self.spec.key, name, err)
        self.frozen.clear()

    def _account(self, now: int) -> None:
        if self.granted is not None:
            self.windows.add(self.granted, self.last_step, now)
        self.last_step = now

    # ------------------------------------------------------------ reporting
    def status(self, now: int) -> dict[str, Any]:
        self._account(now)
        tenants = []
        for spec in self.spec.tenants:
            st = self.sched.tenants.get(spec.name)
            if st is None:
                continue
            frozen_ns = self.frozen_total.get(spec.name, 0)
            if spec.name in self.frozen:
                frozen_ns += now - self.frozen_since.get(spec.name, now)
            state = "frozen" if spec.name in self.frozen else ("running" if st.busy else "idle")
            tenants.append(
                {
                    "name": spec.name,
                    "class": spec.cls,
                    "share": spec.share,
                    "target": spec.target,
                    "demand": spec.demand,
                    "demand_source": self.demand_source(spec),
                    "last_notified_s": (
                        round((now - self.notified_at[spec.name]) / S, 3) if spec.name in self.notified_at else None
                    ),
                    "state": state,
                    "busy": st.busy,
                    "holds_device": self.granted == spec.name,
                    "achieved_1s": round(100 * self.windows.share(spec.name, now, S), 2),
                    "achieved_10s": round(100 * self.windows.share(spec.name, now, 10 * S), 2),
                    "preemptions": st.preemptions,
                    "frozen_s": round(frozen_ns / S, 3),
                    "served_s": round(st.served_ns / S, 3),
                    "memory": spec.memory,
                    "memory_burst": spec.memory_burst,
                    **(self.memory.status(spec.name) if self.memory is not None and self.spec.memory_qos else {}),
                }
            )
        mem = self.spec.memory.to_dict() if self.spec.memory_qos else None
        if mem is not None and self.memory is not None:
            mem.update(self.memory.summary())
        return {
            "gpu": self.spec.key,
            "policy": self.spec.policy,
            "slice_ms": self.spec.slice_ms,
            "memory": mem,
            "holder": self.granted,
            "tenants": tenants,
            "latency": {
                "detection": self.detection.summary(),
                "enforcement": self.enforcement.summary(),
                "preemption": self.preemption.summary(),
                "timer": self.timer.summary(),
            },
        }
