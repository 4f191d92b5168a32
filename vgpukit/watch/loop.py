"""The listening thread: kernel uevents, inotify and NVML events in one ``poll``, feeding the model.

Sources (each optional):

* kernel uevents: pyudev's netlink monitor where the root's ``/sys`` is the running kernel's
  (:func:`vgpukit.host.notify.live_sysfs`), the simulated kernel's feed on a simulated host, none under
  a ``--root`` that is a copied tree (then a committed change of the engine re-reads everything);
* inotify (the host door's, contained in the root): the engine's journal leaving ``/run/vgpukit`` (a
  change committed), ``/etc/vgpukit``, ``/etc/mdevctl.d`` and its parents' directories, and ``/dev/vfio``
  (a node opened or closed: who holds a device), plus any directory a door adds (the kubelet's sockets);
* NVML events: a thread blocks in the driver's wait (``nvmlEventSetWait``) and hands them over.

A burst is taken whole (events are drained until the sources stay quiet for ``DEBOUNCE``) before one
refresh; while a command of vgpukit's is changing the host (the engine's journal is there), the burst
goes on until its commit removes the journal (at most ``HOLD``), so that a command whose events come in
several batches (VFs created, then bound) costs each door one refresh and one publication, not one per
batch half-done. A safety net looks every ``resync`` seconds (default 5 minutes) at what no event reports: the
GPUs' side (a MIG layout another tool changed through NVML, which sends no event: the GPUs, their VFs,
slices, vGPUs and health are read again), and, every :data:`FULL_EVERY`-th time (an hour by default),
everything (an AER counter or a link's speed of any function, a change made while events were lost
unnoticed). Where no kernel uevents come (a ``--root`` that is not the running kernel's) every look is a
full re-read. Why two tiers: docs/decisions.md, "The safety net".
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ..errors import VgpukitError
from ..host import Host
from ..host.notify import (
    CHANGED,
    IN_CLOSE_NOWRITE,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_ISDIR,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_OPEN,
    IN_Q_OVERFLOW,
    Event,
    Inotify,
    Lost,
    Uevent,
)
from ..logs import logger
from ..nvml.model import EventWatcher, NvmlEvent
from ..stopping import readable
from .model import HostModel
from .touch import Touch

log = logger("vgpukit.watch")
RESYNC = 300.0  # seconds between two safety-net looks (the GPUs' side)
FULL_EVERY = 12  # every 12th look of the safety net re-reads everything (an hour at the default)
DEBOUNCE = 0.005  # a burst ends when no event came for this long...
BURST = 0.1  # ...or after this long (a refresh then runs, and the rest of the burst follows)
HOLD = 0.25  # a burst while a command's journal is open waits for its commit this long at most (one refresh)
NVML_WAIT = 5.0  # seconds the NVML thread blocks in the driver's wait before it looks at the stop flag
NVML_THREAD = "vgpukit-watch-nvml"
JOURNAL = "journal"  # the engine's journal (vgpukit/engine/journal.py): removed when a change is committed
LOCK = "lock"  # the host lock (vgpukit/engine/lock.py): closed by its holder when it lets go
HOLDERS = IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE
GONE = IN_DELETE | IN_MOVED_FROM


class Kernel(Protocol):
    """A source of uevents (:class:`~.netlink.NetlinkReader`, the simulator's feed reader)."""

    def fileno(self) -> int: ...

    def read(self) -> list[Uevent]: ...

    def close(self) -> None: ...


NvmlOpener = Callable[[], tuple[EventWatcher | None, Callable[[], None]]]


def host_dirs(host: Host) -> dict[str, tuple[int, str]]:
    """The directories every watch listens to: path -> (inotify mask, kind of change)."""
    return {
        str(host.state_dir()): (CHANGED, "docs"),
        str(host.config_dir()): (CHANGED, "docs"),
        str(host.mdevctl_dir()): (CHANGED, "docs"),
        str(host.vfio_dir()): (HOLDERS | CHANGED, "holders"),
        str(host.vfio_dir() / "devices"): (HOLDERS | CHANGED, "holders"),
    }


class Watch:
    def __init__(
        self,
        model: HostModel,
        host: Host,
        kernel: Kernel | None,
        nvml: NvmlOpener | None = None,
        resync: float = RESYNC,
        dirs: dict[str, tuple[int, str]] | None = None,
    ) -> None:
        self.model = model
        self.host = host
        self.kernel = kernel
        self.nvml = nvml
        self.resync = resync
        self.dirs = {**host_dirs(host), **(dirs or {})}
        self.inotify = Inotify(host)
        self.missing: set[str] = set()  # wanted directories not there yet (their parent is watched)
        self.stop = threading.Event()
        self.stop_r, self.stop_w = os.pipe()
        self.nvml_r, self.nvml_w = os.pipe()
        for fd in (self.stop_r, self.nvml_r):
            os.set_blocking(fd, False)
        self.nvml_events: list[NvmlEvent] = []
        self.nvml_lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.listeners: list[Callable[[Touch], None]] = []  # told of every batch (after the refresh)
        self.next_resync = time.monotonic() + resync
        self.nets = 0  # safety-net looks so far

    # ------------------------------------------------------------------ set-up
    def describe(self) -> str:
        kernel = "no kernel uevents (the root is not the running kernel's)" if self.kernel is None else "kernel uevents"
        what = [kernel, "inotify", *(["NVML events"] if self.nvml is not None else [])]
        full = self.resync if self.kernel is None else self.resync * FULL_EVERY
        net = f"the GPUs' side read again every {self.resync:g} s, everything every {full:g} s"
        return f"listening to {', '.join(what)}; {net}"

    def _add_dirs(self) -> None:
        for path, (mask, _kind) in list(self.dirs.items()):
            if path in self.inotify.watched or (path in self.missing and not self.host.is_dir(path)):
                continue
            if self.inotify.add(path, mask | IN_CREATE | IN_MOVED_TO):
                self.missing.discard(path)
                if path == str(self.host.mdevctl_dir()):  # definitions live one level down, by parent
                    for sub in self.host.listdir(path):
                        if self.host.is_dir(Path(path, sub)):
                            self.dirs.setdefault(str(Path(path, sub)), (CHANGED, "docs"))
                            self.inotify.add(Path(path, sub), CHANGED)
            else:
                self.missing.add(path)
                parent = os.path.dirname(path)
                if parent not in self.inotify.watched:
                    self.inotify.add(parent, IN_CREATE | IN_MOVED_TO)

    def start(self) -> Watch:
        """Listen from now on, read the host once (a full refresh), then follow it in a thread."""
        self._add_dirs()
        nvml = self._open_nvml()  # before the first read: an event from then on is not missed
        try:
            self.model.refresh(self._everything("start"))
        except BaseException:  # nothing left listening: what was opened is closed
            if nvml is not None:
                nvml[0].close()
                nvml[1]()
            self.close()
            raise
        if nvml is not None:
            loop = threading.Thread(target=self._nvml_loop, args=nvml, daemon=True, name=NVML_THREAD)
            self.threads.append(loop)
        self.threads.append(threading.Thread(target=self._loop, daemon=True, name="vgpukit-watch"))
        for t in self.threads:
            t.start()
        return self

    @staticmethod
    def _everything(why: str) -> Touch:
        t = Touch()
        t.everything(why)
        return t

    # ------------------------------------------------------------------ the loop
    def _fds(self) -> list[int]:
        fds = [self.stop_r, self.inotify.fileno(), self.nvml_r]
        return fds + ([self.kernel.fileno()] if self.kernel is not None else [])

    def _take(self, ready: list[int], touch: Touch) -> None:
        if self.kernel is not None and self.kernel.fileno() in ready:
            try:
                for uev in self.kernel.read():
                    touch.uevent(uev)
            except Lost as lost:
                log.warning("%s: reading the host again", lost)
                touch.everything(str(lost))
        if self.inotify.fileno() in ready:
            for ev in self.inotify.read():
                self._file_event(ev, touch)
        if self.nvml_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self.nvml_r, 4096)
            with self.nvml_lock:
                events, self.nvml_events = self.nvml_events, []
            if events:  # taken with this batch: they reach the refresh that the batch makes
                touch.kinds.add("nvml")
                touch.nvml_events += events
                touch.why += [f"nvml {e.kind} gpu{e.gpu}" for e in events]

    def _file_event(self, ev: Event, touch: Touch) -> None:
        if ev.mask & IN_Q_OVERFLOW:
            touch.everything("inotify queue overflow")
            return
        if ev.dir not in self.dirs:  # the parent of a wanted directory that was not there
            if ev.name and os.path.join(ev.dir, ev.name) in self.missing:
                self._add_dirs()
                touch.kinds.add("docs")
            return
        if not ev.name or ev.name.startswith("."):  # the directory itself, the temporary of an atomic write
            return
        _mask, kind = self.dirs[ev.dir]
        if ev.dir == str(self.host.state_dir()) and ev.name == LOCK and ev.mask & IN_CLOSE_WRITE:
            touch.kinds.add("lock")  # a command let go of the host lock (or a waiter gave up)
            touch.why.append(f"{self.host.display(ev.dir)}/{ev.name} closed")
            return
        if ev.dir == str(self.host.state_dir()) and (ev.name != JOURNAL or not ev.mask & GONE):
            return  # the engine's records, the health record: only a committed (or undone) change counts
        if ev.mask & IN_ISDIR and ev.mask & (IN_CREATE | IN_MOVED_TO) and ev.dir == str(self.host.mdevctl_dir()):
            sub = os.path.join(ev.dir, ev.name)  # a new parent's definitions
            self.dirs.setdefault(sub, (CHANGED, "docs"))
            self.inotify.add(sub, CHANGED)
        if kind == "holders":
            if ev.mask & HOLDERS:
                touch.kinds.add("holders")
            if ev.mask & (IN_CREATE | IN_MOVED_TO | GONE):  # a node came or went: its group's functions
                touch.kinds.add("pci" if self.kernel is not None else "docs")  # (without uevents: the only word)
                if ev.dir == str(self.host.vfio_dir()) and ev.name.isdigit():
                    touch.groups.add(ev.name)
        else:
            touch.kinds.add(kind)
            touch.settings |= ev.dir != str(self.host.state_dir())  # a config file, not the journal gone
        touch.why.append(f"{self.host.display(ev.dir)}/{ev.name}")
        if self.kernel is None and "docs" in touch.kinds and not touch.full:
            touch.everything("a change without kernel uevents under this root")  # it says not what changed

    def _loop(self) -> None:
        while not self.stop.is_set():
            timeout = max(0.0, self.next_resync - time.monotonic())
            try:
                ready = readable(self._fds(), timeout)
            except InterruptedError:
                continue
            if self.stop_r in ready:
                return
            touch = self.safety_net() if not ready else Touch()
            start = time.monotonic()
            while ready:
                self._take(ready, touch)
                if touch.full:
                    break
                left = start + BURST - time.monotonic()
                ready = readable(self._fds(), min(DEBOUNCE, left)) if left > 0 else []
                hold = start + HOLD - time.monotonic()
                if not ready and hold > 0 and self._in_command():  # one refresh for the whole command
                    ready = readable(self._fds(), hold)  # its commit (the journal removed) or more events
                if self.stop_r in ready:
                    return
            if touch.full or touch.net:
                self.next_resync = time.monotonic() + self.resync
            if touch.full or touch.kinds & self.model.needs():
                self._refresh(touch)
            elif touch:
                for listener in self.listeners:
                    listener(touch)

    def _in_command(self) -> bool:
        """Whether a command of vgpukit's is changing the host (its journal there: removed at its commit)."""
        try:
            return self.host.exists(self.host.state_dir(JOURNAL))
        except (OSError, VgpukitError):
            return False

    def safety_net(self) -> Touch:
        """What the safety net's next look reads: everything every :data:`FULL_EVERY`-th time (always
        without kernel uevents), else the GPUs' side (a ``pci`` and ``nvml`` change naming no function:
        the views read the GPUs again and keep the other functions' records)."""
        self.nets += 1
        touch = Touch(net=True)
        if self.kernel is None or self.nets % FULL_EVERY == 0:
            touch.everything("safety net")
        else:
            touch.kinds |= {"pci", "nvml"}
            touch.why.append("safety net: the GPUs' side")
        return touch

    def _refresh(self, touch: Touch) -> None:
        try:
            changed = self.model.refresh(touch, touch.nvml_events)
        except Exception as err:  # never end listening silently: the view would go stale
            log.warning("refreshing the host model failed (tried again at the next change): %s: %s",
                        type(err).__name__, err)  # fmt: skip
            return
        log.debug("refresh (%s): %s changed", "; ".join(touch.why[:5]), ", ".join(sorted(changed)) or "nothing")
        for listener in self.listeners:
            listener(touch)

    def _open_nvml(self) -> tuple[EventWatcher, Callable[[], None]] | None:
        if self.nvml is None:
            return None
        try:
            watcher, close = self.nvml()
        except VgpukitError as err:
            log.warning("NVML events not watched: %s", err)
            return None
        if watcher is None:
            close()
            return None
        return watcher, close

    def _nvml_loop(self, watcher: EventWatcher, close: Callable[[], None]) -> None:
        try:
            while not self.stop.is_set():
                events = watcher.wait(NVML_WAIT)
                if events:
                    with self.nvml_lock:
                        self.nvml_events += events
                    with contextlib.suppress(BlockingIOError, BrokenPipeError):  # full: a wake-up is pending
                        os.write(self.nvml_w, b"n")  # closed: the watch has stopped reading
        except Exception as err:  # never end this thread by an exception: the host may be gone under it
            if not self.stop.is_set():  # a stopped watch's host may be gone (a test's directory): said nothing
                log.warning("NVML events no longer watched: %s: %s", type(err).__name__, err)
        finally:
            os.close(self.nvml_w)  # this thread's end of the pipe: close() leaves it to the thread
            watcher.close()
            close()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            os.write(self.stop_w, b"x")
        for t in self.threads:  # the NVML thread, blocked in the driver's wait, ends by itself (a daemon)
            if t.name != NVML_THREAD:
                t.join(5)
        self.inotify.close()
        if self.kernel is not None:
            self.kernel.close()
        nvml_thread = any(t.name == NVML_THREAD for t in self.threads)  # it closes nvml_w when it ends
        for fd in (self.stop_r, self.stop_w, self.nvml_r, *(() if nvml_thread else (self.nvml_w,))):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.model.poke()
