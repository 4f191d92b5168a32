"""The shipping tests' set-ups started at collection (the debootstrap, the builds: tests/ship/conftest.py)
run beside the host-side tests, which are the session's critical path (CONTRIBUTING.md, "The suite's
time budget"). They run at a lower priority, so that on a machine with fewer free cores than runnable
jobs the tests and the real-kernel guest keep theirs and the builds take what is left. (The guest's
thread keeps the tests' priority: under TCG a starved guest runs out of its time limit.)"""

from __future__ import annotations

import contextlib
import os

NICE = 5  # CFS weight 335 against 1024: the builds take what the tests and the guest leave


def lower_priority() -> None:
    """Lower the calling thread's priority, and that of every process it starts from now on. On Linux
    the nice value belongs to the thread (nice(2), setpriority(2) "BUGS"), so the tests' own thread
    keeps its priority."""
    with contextlib.suppress(OSError):
        os.nice(NICE)
