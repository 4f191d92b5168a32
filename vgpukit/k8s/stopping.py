"""How the kubelet plugins end on SIGTERM/SIGINT without a chance of hanging.

A Python signal handler runs in the main thread between any two bytecodes, including inside
``threading.Event.wait()`` while the main thread holds the event's own lock. A handler that calls
``Event.set()`` then waits forever for that lock: the process ignores every later SIGTERM until the
kubelet's (or systemd's) SIGKILL. It happened to the DRA plugin under load. So the handler here only
sets a flag, and waiting is sleeping in short steps that look at it.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Protocol

POLL = 0.2  # seconds: the longest a requested stop goes unnoticed by a waiter


class Stopping(Protocol):
    """What a serving loop waits on: this module's ``Stop`` or a ``threading.Event`` (tests, threads)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Stop:
    """``is_set`` / ``set`` / ``wait(timeout)`` like ``threading.Event``, safe to set from a signal handler."""

    def __init__(self, poll: float = POLL) -> None:
        self._flag = False
        self.poll = poll

    def on_signals(self, *signums: int) -> Stop:
        """Set by SIGTERM and SIGINT (or ``signums``) from now on."""
        for signum in signums or (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handler)
        return self

    def _handler(self, _signum: int, _frame: FrameType | None) -> None:
        self._flag = True  # a plain store: nothing here may take a lock the interrupted code could hold

    def set(self) -> None:
        self._flag = True

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        """Until set (True) or ``timeout`` seconds passed (False); a signal is seen within ``poll`` seconds,
        whichever thread the kernel delivered it to."""
        end = None if timeout is None else time.monotonic() + timeout
        while not self._flag:
            step = self.poll if end is None else min(self.poll, end - time.monotonic())
            if step <= 0:
                break
            time.sleep(step)
        return self._flag


def wait_woken(stop: Stopping, woken: threading.Event, timeout: float) -> bool:
    """Until ``woken`` is set (True, and it is cleared), ``stop`` is set or ``timeout`` passed (False);
    ``stop`` looked at every POLL seconds (a signal handler only sets its flag, see above)."""
    end = time.monotonic() + timeout
    while not stop.is_set():
        left = end - time.monotonic()
        if left <= 0:
            return False
        if woken.wait(min(POLL, left)):
            woken.clear()
            return True
    return False
