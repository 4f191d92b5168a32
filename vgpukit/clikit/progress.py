"""What a command shows while the change engine works (the engine's :class:`~vgpukit.engine.progress.Progress`).

* On a terminal (stderr is one, no ``--json``): one rich progress line on stderr -- what runs
  (applying / rolling back / recovering), the step in progress, done/total and the time --, removed
  when the run ends, before the command prints its summary.
* Otherwise (a pipe, a log, ``--json``): nothing but the host-lock notice.
* Either way, a command that finds the host lock held says so at once on stderr, with the holder
  and how long it will wait: ``vgpukit: waiting for pid 4242 (vgpukit partition gpu0 ...), up to 30 s``.
"""

from __future__ import annotations

import sys
from typing import Any


def waiting_line(holder: str, seconds: float) -> str:
    return f"vgpukit: waiting for {holder}, up to {seconds:g} s\n"


class Notices:
    """Not a terminal, or ``--json``: only the lock notice."""

    def waiting(self, holder: str, seconds: float) -> None:
        sys.stderr.write(waiting_line(holder, seconds))
        sys.stderr.flush()

    def begin(self, what: str, total: int) -> None:
        pass

    def advance(self, text: str) -> None:
        pass

    def end(self) -> None:
        pass


class TerminalProgress(Notices):
    """A rich progress line on stderr, redrawn about ten times a second and at each run's start and end."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._task: Any = None
        self._what = ""

    def begin(self, what: str, total: int) -> None:
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            from rich.table import Column

            self._bar = Progress(
                TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True, highlight=False),
                transient=True,
                expand=True,
            )
            self._bar.start()
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._what = what
        self._task = self._bar.add_task(what, total=total)
        self._bar.refresh()

    def advance(self, text: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, advance=1, description=f"{self._what}: {text}")

    def end(self) -> None:
        if self._bar is not None:
            self._bar.refresh()
            self._bar.stop()
        self._bar, self._task = None, None

    def waiting(self, holder: str, seconds: float) -> None:
        if self._bar is not None:
            self._bar.console.print(waiting_line(holder, seconds), end="")
        else:
            super().waiting(holder, seconds)


def progress_for(as_json: bool) -> Notices:
    """The observer for a command: a progress line on a terminal (without --json), else only the lock notice."""
    if not as_json and sys.stderr.isatty():
        return TerminalProgress()
    return Notices()
