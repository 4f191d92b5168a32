"""The watched host model: views of the host kept current by what each change names.

A *view* is a function of one :class:`Refresh` (a fresh host and NVML, the model's :class:`WarmScan`,
the NVML events that came): the device inventory, the health layer's answer... Each names the kinds of
change it depends on (:mod:`.touch`); a refresh recomputes only those, over a PCI snapshot from which
only the functions the change named were dropped, so a VF created on a 1,024-VF host reads that VF and
its PF again, not the bus. A full refresh (start, lost events, the safety net) drops the snapshot.

Readers take a view's value (:meth:`HostModel.get`) or wait for the next change (:meth:`HostModel.wait`).
A view that fails keeps its last value (a GPU that fell off the bus fails the inventory's read: the
doors keep the devices they had and the health layer marks them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import VgpukitError
from ..host import Host
from ..logs import logger
from ..nvml.model import Nvml, NvmlEvent
from .scan import WarmScan
from .touch import Touch

log = logger("vgpukit.watch")
Opener = Callable[[], tuple[Host, Nvml | None, Callable[[], None]]]


@dataclass
class Refresh:
    """What a view reads from: opened afresh for each refresh, the PCI snapshot kept."""

    host: Host
    nvml: Nvml | None
    scan: WarmScan
    touch: Touch
    nvml_events: list[NvmlEvent]
    values: dict[str, Any]  # the views' values so far (those computed before this one: this refresh's)

    def value(self, name: str) -> Any:
        return self.values.get(name)


@dataclass(frozen=True)
class View:
    compute: Callable[[Refresh], Any]
    needs: frozenset[str]  # kinds of change it depends on (a full refresh recomputes every view)


def view(compute: Callable[[Refresh], Any], *needs: str) -> View:
    return View(compute, frozenset(needs))


@dataclass
class Stats:
    refreshes: int = 0
    full: int = 0
    seconds: float = 0.0  # CPU time spent refreshing
    last: list[str] = field(default_factory=list)  # the views the last refresh changed


class HostModel:
    def __init__(self, opener: Opener, views: dict[str, View]) -> None:
        self.opener = opener
        self.views = views
        self.values: dict[str, Any] = {}
        self.version = 0
        self.cond = threading.Condition()
        self.scan: WarmScan | None = None
        self.stats = Stats()
        self.lock = threading.Lock()  # one refresh at a time (the watch's thread, or a reader that asks)
        self.listeners: set[Callable[[], None]] = set()  # called on a change or nudge (an event loop's wake-up)

    def refresh(self, touch: Touch, nvml_events: list[NvmlEvent] | None = None) -> set[str]:
        """Recompute the views ``touch`` concerns; the names of those whose value changed."""
        with self.lock:
            cpu = time.process_time()
            host, nvml, close = self.opener()
            try:
                full = touch.full or self.scan is None
                if full:
                    self.scan = WarmScan(host)
                else:
                    assert self.scan is not None
                    self.scan.forget(touch.bdfs, touch.added, host)
                ctx = Refresh(host, nvml, self.scan, touch, list(nvml_events or []), dict(self.values))
                changed: set[str] = set()
                for name, v in self.views.items():
                    if not (full or v.needs & touch.kinds or name not in self.values):
                        continue
                    try:
                        value = v.compute(ctx)
                    except VgpukitError as err:
                        log.warning("%s not read again (kept as it was): %s", name, err)
                        continue
                    if name not in ctx.values or ctx.values[name] != value:
                        changed.add(name)
                    ctx.values[name] = value
            finally:
                close()
            self.stats.refreshes += 1
            self.stats.full += full
            self.stats.seconds += time.process_time() - cpu
            self.stats.last = sorted(changed)
            with self.cond:
                self.values = ctx.values
                if changed:
                    self.version += 1
                    self.cond.notify_all()
            if changed:
                self._tell()
            return changed

    def needs(self) -> set[str]:
        """Every kind of change some view depends on (others refresh nothing)."""
        return {k for v in self.views.values() for k in v.needs}

    def get(self, name: str) -> Any:
        with self.cond:
            return self.values.get(name)

    def wait(self, since: int, timeout: float | None, until: Callable[[], bool] | None = None) -> int:
        """The version once it differs from ``since`` (a view changed), ``until()`` is true (looked at
        when the model changes, or on :meth:`nudge`) or ``timeout`` passed."""
        with self.cond:
            self.cond.wait_for(lambda: self.version != since or (until is not None and until()), timeout=timeout)
            return self.version

    def nudge(self) -> None:
        """Wake every waiter to look at its ``until`` (a stop, a stream that ended), the views unchanged."""
        with self.cond:
            self.cond.notify_all()
        self._tell()

    def poke(self) -> None:
        """Wake every waiter (a watch that closes)."""
        with self.cond:
            self.version += 1
            self.cond.notify_all()
        self._tell()

    def _tell(self) -> None:
        for listener in list(self.listeners):
            listener()
