"""Work the suite starts in background threads at collection (the real-kernel guests' QEMU boots, the
shipping tests' debootstrap and builds) runs beside the host-side tests, which are the session's
critical path (CONTRIBUTING.md, "The suite's time budget"). It runs at a lower priority, so that on a
machine with fewer free cores than runnable jobs the tests keep theirs and the background work takes
what is left."""

from __future__ import annotations

import contextlib
import os

NICE = 5  # CFS weight 335 against the tests' 1024: the tests keep a whole core when three jobs share two


def lower_priority() -> None:
    """Lower the calling thread's priority, and that of every process it starts from now on. On Linux
    the nice value belongs to the thread (nice(2), setpriority(2) "BUGS"), so the tests' own thread
    keeps its priority."""
    with contextlib.suppress(OSError):
        os.nice(NICE)
