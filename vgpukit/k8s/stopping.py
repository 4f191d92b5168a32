"""How the kubelet plugins end on SIGTERM/SIGINT without a chance of hanging.

A Python signal handler runs in the main thread between any two bytecodes, including inside
``threading.Event.wait()`` while the main thread holds the event's own lock. A handler that calls
``Event.set()`` then waits forever for that lock: the process ignores every later SIGTERM until the
kubelet's (or systemd's) SIGKILL. It happened to the DRA plugin under load. So the handler here only
sets a flag and writes a byte into a pipe, and waiting is ``select`` on that pipe.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from types import FrameType
from typing import Any, Protocol

POLL = 0.2  # seconds: the longest a requested stop goes unnoticed by a waiter on a threading.Event


class Stopping(Protocol):
    """What a serving loop waits on: this module's ``Stop`` or a ``threading.Event`` (tests, threads)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Bell:
    """A wake-up any thread, or a signal handler, may ring: a byte in a pipe (no lock, so a handler that
    interrupts a waiter cannot deadlock it), waited for with ``select`` (a waiter costs nothing)."""

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
    """``is_set`` / ``set`` / ``wait(timeout)`` like ``threading.Event``, safe to set from a signal handler.

    Set, it rings its :class:`Bell` (never taken: once set, every waiter's ``select`` returns at once).
    :meth:`on_signals` also makes the signal's own arrival ring it (``signal.set_wakeup_fd``), whichever
    thread the kernel delivered it to: the main thread, blocked in ``select``, wakes and runs the handler.
    """

    def __init__(self, poll: float = POLL) -> None:
        self._flag = False
        self.poll = poll  # the longest a waiter sleeps when no bell can wake it (kept for callers)
        self.bell = Bell()

    def on_signals(self, *signums: int) -> Stop:
        """Set by SIGTERM and SIGINT (or ``signums``) from now on (from the main thread)."""
        for signum in signums or (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handler)
        signal.set_wakeup_fd(self.bell._w)
        return self

    def _handler(self, _signum: int, _frame: FrameType | None) -> None:
        self._flag = True  # a plain store and a write: nothing here may take a lock the interrupted code holds
        self.bell.ring()

    def set(self) -> None:
        self._flag = True
        self.bell.ring()

    def is_set(self) -> bool:
        return self._flag

    def fileno(self) -> int:
        return self.bell.fileno()

    def wait(self, timeout: float | None = None) -> bool:
        """Until set (True) or ``timeout`` seconds passed (False)."""
        end = None if timeout is None else time.monotonic() + timeout
        while not self._flag:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                break
            ready, _, _ = select.select([self.bell], [], [], left)
            if ready and not self._flag:  # the signal's own byte, its handler not run yet (main thread)
                time.sleep(0.001)
        return self._flag


def wait_woken(stop: Stopping, woken: Bell, timeout: float) -> bool:
    """Until ``woken`` rang (True, and it is quiet again), ``stop`` is set or ``timeout`` passed (False).
    A ``stop`` that is no :class:`Stop` (a ``threading.Event``: tests, threads) is looked at every POLL seconds."""
    end = time.monotonic() + timeout
    fds: list[Any] = [woken] + ([stop] if isinstance(stop, Stop) else [])
    while not stop.is_set():
        left = end - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select(fds, [], [], left if isinstance(stop, Stop) else min(POLL, left))
        if woken in ready and woken.take():
            return not stop.is_set()
        if stop in ready and not stop.is_set():
            time.sleep(0.001)  # the signal's own byte, its handler not run yet
    return False
