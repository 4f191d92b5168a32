"""The program's loggers, and how a warning logged where nothing is set up reads (``vgpukit: warning: ...``).

Python's ``logging`` costs several milliseconds to import, and a read-only command logs nothing: it is
imported by the modules that log (the change engine, mdevctl call-outs, NVML, the daemons), which take
their logger from :func:`logger`. That is also where the ``vgpukit: warning:`` last-resort handler is put
in place, so it is there whenever something of ours can log, and ``logging`` is not loaded otherwise.
``--debug`` configures logging itself (``logging.basicConfig``) before any command runs.
"""

from __future__ import annotations

import logging
import sys


class _Warnings(logging.StreamHandler):  # type: ignore[type-arg]
    """Python's last-resort handler with the ``vgpukit: warning:`` prefix (stderr of the moment)."""

    def __init__(self) -> None:
        super().__init__()
        self.setLevel(logging.WARNING)
        self.setFormatter(logging.Formatter("vgpukit: warning: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def prefix_warnings() -> None:
    """Warnings logged where no handler is set up (a rollback step that failed) read like our errors."""
    if not isinstance(logging.lastResort, _Warnings):
        logging.lastResort = _Warnings()


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, with the ``vgpukit: warning:`` last resort in place."""
    prefix_warnings()
    return logging.getLogger(name)


def debug_logging() -> None:
    """``--debug``: every logger's debug messages, with their logger's name, on stderr."""
    logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
