"""The kubelet plugins' stop on SIGTERM: a signal at any moment ends the wait, never hangs it.

A fresh-machine run once timed out on a DRA plugin that ignored SIGTERM: its handler called
``threading.Event.set()``, and a signal that lands while the main thread is inside ``Event.wait()``
(holding the event's lock) makes the handler wait for that lock forever. The child below is
signalled thousands of times while it does nothing but wait; with the old handler it hangs or dies
within a second.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from vgpukit.stopping import Stop

ROOT = str(Path(__file__).resolve().parents[2])

CHILD = textwrap.dedent(
    """
    import os, signal, threading, time
    from vgpukit.stopping import Stop

    stop = Stop().on_signals()

    def signals():
        for _ in range(400):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.002)

    sender = threading.Thread(target=signals)
    sender.start()
    waits = 0
    while sender.is_alive():
        stop.wait(0.0001)
        waits += 1
    print("stopped" if stop.is_set() else "not stopped", waits)
    """
)


def test_a_signal_inside_the_wait_never_hangs_it() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env={"PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "stopped", out.stdout


def test_wait_answers_like_an_event() -> None:
    stop = Stop()
    began = time.monotonic()
    assert stop.wait(0.05) is False and time.monotonic() - began >= 0.05
    assert not stop.is_set()
    threading.Timer(0.05, stop.set).start()
    assert stop.wait() is True  # no timeout: until set
    assert stop.is_set() and stop.wait(0) is True


# the syscalls a waiter may block in (x86_64, aarch64) and where their timeout argument is (None: an int)
WAITS = {
    "x86_64": {23: 4, 270: 4, 7: None, 271: 2},  # select, pselect6: the timeout pointer; poll: int; ppoll: pointer
    "aarch64": {72: 4, 73: 2},  # pselect6, ppoll
}


def blocked_without_timeout(tid: int) -> bool:
    """Whether the thread is blocked in select/poll with no timeout (a NULL pointer, or poll's -1), from
    /proc/self/task/TID/syscall: the syscall number, then its six arguments."""
    import platform

    fields = Path(f"/proc/self/task/{tid}/syscall").read_text().split()
    if not fields or fields[0] in ("running", "-1"):
        return False
    where = WAITS[platform.machine()]
    nr = int(fields[0])
    if nr not in where:
        return False
    arg = where[nr]
    if arg is None:  # poll(fds, nfds, timeout): -1
        return int(fields[3], 16) & 0xFFFFFFFF == 0xFFFFFFFF
    return int(fields[1 + arg], 16) == 0


def settled(thread: threading.Thread) -> bool:
    end = time.monotonic() + 5
    while time.monotonic() < end:
        if thread.native_id is not None and blocked_without_timeout(thread.native_id):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("waiter", ["Stop.wait", "wait_woken", "MetricsServer.serve", "Stop.then"])
def test_an_idle_waiter_blocks_with_no_timeout(waiter: str) -> None:
    """No periodic wakeup, proved by structure: the idle waiter of every daemon's stop idiom is blocked in
    the kernel in a select with no timeout (not a timed test: the kernel says what it waits in)."""
    from prometheus_client import CollectorRegistry

    from vgpukit.metrics_server import MetricsServer
    from vgpukit.stopping import Bell, wait_woken

    stop = Stop()
    if waiter == "Stop.wait":
        thread = threading.Thread(target=stop.wait, daemon=True)
        thread.start()
    elif waiter == "wait_woken":
        thread = threading.Thread(target=wait_woken, args=(stop, Bell(), None), daemon=True)
        thread.start()
    elif waiter == "MetricsServer.serve":
        thread = MetricsServer(CollectorRegistry(), "127.0.0.1", 0).serve_in_thread(stop)
    else:
        thread = stop.then(lambda: None)
    try:
        assert settled(thread), Path(f"/proc/self/task/{thread.native_id}/syscall").read_text()
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
