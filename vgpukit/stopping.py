"""How every long-running vgpukit process stops: one idiom for the device plugin, the DRA plugin, the
node agent, the exporter, the QoS daemon and ``health --watch`` (docs/engine.md, "How a daemon stops").

A Python signal handler runs in the main thread between any two bytecodes, including inside
``threading.Event.wait()`` while the main thread holds the event's own lock. A handler that calls
``Event.set()`` then waits forever for that lock: the process ignores every later SIGTERM until the
kubelet's (or systemd's) SIGKILL. It happened to the DRA plugin under load. So the handler here only
sets a flag and writes a byte into a pipe (:class:`Bell`), and every waiter blocks in ``poll`` (:func:`readable`) on
that pipe, with no timeout unless it has a deadline of its own: nothing wakes to look at a flag.
A waiter that blocks in something else (a queue) is told by :meth:`Stop.then`, a thread blocked on the
pipe.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any


def readable(fds: list[Any], timeout: float | None) -> list[Any]:
    """Those of ``fds`` (file descriptors or objects with ``fileno()``) ready to read, waiting up to
    ``timeout`` seconds (None: no timeout). ``poll``, not ``select``: a process with many files open (a
    daemon with many sockets) has descriptors above ``select``'s limit of 1024."""
    poller = select.poll()
    by_fd: dict[int, Any] = {}
    for f in fds:
        fd = f if isinstance(f, int) else f.fileno()
        by_fd[fd] = f
        poller.register(fd, select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP)
    ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
    return [by_fd[fd] for fd, _ in poller.poll(ms)]


class Bell:
    """A wake-up any thread, or a signal handler, may ring: a byte in a pipe (no lock, so a handler that
    interrupts a waiter cannot deadlock it), waited for with ``poll`` (a waiter costs nothing)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def fileno(self) -> int:
        return self._r

    def ring(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe is ringing already
            os.write(self._w, b"x")

    def take(self) -> bool:
        """Whether it rang since the last take (and it is quiet again)."""
        rang = False
        with contextlib.suppress(BlockingIOError):
            while os.read(self._r, 512):
                rang = True
        return rang


class Stop:
    """``is_set`` / ``set`` / ``wait(timeout)`` like ``threading.Event``, safe to set from a signal handler
    and from any thread.

    Set, it rings its :class:`Bell` (never taken: once set, every waiter's ``poll`` returns at once).
    :meth:`on_signals` also makes the signal's own arrival ring it (``signal.set_wakeup_fd``), whichever
    thread the kernel delivered it to: the main thread, blocked in ``poll``, wakes and runs the handler.
    """

    def __init__(self) -> None:
        self._flag = False
        self.bell = Bell()
        self._before: dict[int, Any] = {}  # the handlers (and wake-up fd, at -1) that on_signals replaced
        self._waiters: list[Bell] = []  # rung when set, never by another signal's byte (:meth:`waiter`)

    def on_signals(self, *signums: int, hangup: Callable[[], None] | None = None) -> Stop:
        """Set by SIGTERM and SIGINT (or ``signums``) from now on (from the main thread); with ``hangup``,
        SIGHUP calls it (it may only set a flag: the waiter wakes and looks). :meth:`restore` undoes it."""
        if threading.current_thread() is not threading.main_thread():
            return self  # signals reach the main thread only: a door run in a thread (tests) is stopped by set()
        handlers: dict[int, Any] = {int(s): self._handler for s in signums or (signal.SIGTERM, signal.SIGINT)}
        if hangup is not None:

            def hung_up(_signum: int, _frame: FrameType | None) -> None:
                hangup()
                self.bell.ring()  # its own byte: a waiter that took the wake-up byte first wakes again

            handlers[int(signal.SIGHUP)] = hung_up
        for signum, handler in handlers.items():
            self._before.setdefault(signum, signal.signal(signum, handler))
        self._before.setdefault(-1, signal.set_wakeup_fd(self.bell._w))
        return self

    def restore(self) -> None:
        """The signal handlers and wake-up fd as they were before :meth:`on_signals`."""
        for signum, before in self._before.items():
            if signum == -1:
                signal.set_wakeup_fd(before)
            else:
                signal.signal(signum, before)
        self._before.clear()

    def _handler(self, _signum: int, _frame: FrameType | None) -> None:
        self.set()  # a plain store and writes: nothing here may take a lock the interrupted code holds

    def set(self) -> None:
        self._flag = True
        self.bell.ring()
        for bell in self._waiters:
            bell.ring()

    def waiter(self) -> Bell:
        """A pipe for another thread's ``poll`` beside the main loop's: rung when set, and only then (the
        wake-up bytes of a signal that does not stop, SIGHUP, stay in the main pipe for the main loop)."""
        bell = Bell()
        self._waiters.append(bell)
        if self._flag:
            bell.ring()
        return bell

    def is_set(self) -> bool:
        return self._flag

    def fileno(self) -> int:
        return self.bell.fileno()

    def wait(self, timeout: float | None = None) -> bool:
        """Until set (True) or ``timeout`` seconds passed (False); no timeout: one ``poll`` without one."""
        wait_woken(self, None, timeout)
        return self._flag

    def quiet(self) -> None:
        """Take the bytes of signals that did not set it (SIGHUP): the pipe is quiet until the next one.
        Once set it rings again, so that no other waiter misses it."""
        if not self._flag:
            self.bell.take()
            if self._flag:
                self.bell.ring()

    def then(self, call: Callable[[], None], name: str = "vgpukit-stop") -> threading.Thread:
        """Call ``call`` once set, from a thread blocked until then (for a waiter blocked in a queue: ``call``
        puts its word there; ``queue.SimpleQueue.put`` may be called from anywhere)."""

        def run() -> None:
            self.wait()
            call()

        thread = threading.Thread(target=run, daemon=True, name=name)
        thread.start()
        return thread


def wait_woken(stop: Stop, woken: Bell | None, timeout: float | None) -> bool:
    """Until ``woken`` rang (True, and it is quiet again), ``stop`` is set or ``timeout`` passed (False):
    one ``poll`` on both pipes (no timeout: ``None``; no ``woken``: the stop's pipe alone, as
    :meth:`Stop.wait`)."""
    end = None if timeout is None else time.monotonic() + timeout
    while not stop.is_set():
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
            return False
        fds: list[Any] = [stop] if woken is None else [woken, stop]
        ready = readable(fds, left)
        if woken is not None and woken in ready and woken.take():
            return not stop.is_set()
        if stop in ready and not stop.is_set():
            time.sleep(0.001)  # the signal's own byte, its handler not run yet
            stop.quiet()
    return False
