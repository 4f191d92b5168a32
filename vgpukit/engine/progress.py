"""What the change engine tells a front end while it works (an optional observer on :class:`Env`).

The engine never prints: it calls the observer a command gave it (``Env.progress``), if any. The
CLI's (``vgpukit/clikit/progress.py``) draws one progress line on a terminal and says at once when the
host lock is held by another command; a library caller passes nothing and hears nothing.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def waiting(self, holder: str, seconds: float) -> None:
        """The host lock is held by ``holder`` ("pid 4242 (vgpukit partition gpu0 ...)", or
        "another process"); the command waits for it up to ``seconds``."""

    def begin(self, what: str, total: int) -> None:
        """A run of ``total`` steps starts: ``what`` is "applying", "rolling back" or "recovering"."""

    def advance(self, text: str) -> None:
        """One step of the run is done; ``text`` is its description."""

    def end(self) -> None:
        """The run is over (done, failed or interrupted)."""
