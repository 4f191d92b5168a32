"""Crash testing: a simulated host's process kills itself (SIGKILL) just before its Nth event of a kind,
as a power cut or kill -9 between two durable changes would on a real host. N comes from an
environment variable (``VGPUKIT_SIM_CRASH_AT_WRITE``, ``..._AT_CHANGE``, ``..._AT_NVML_CALL``); unset
or 0: never."""

from __future__ import annotations

import os


class KillAt:
    """Counts the events of one kind; at the Nth (``raw``: the variable's value), the process dies before
    the event happens."""

    def __init__(self, raw: str) -> None:
        self.at = int(raw) if raw.isascii() and raw.isdigit() else 0
        self.count = 0

    def tick(self) -> None:
        self.count += 1
        if self.at and self.count >= self.at:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
