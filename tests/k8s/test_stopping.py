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
