"""Apply a list of steps to the host; on failure undo what was done, in reverse.

Every step that changes the host registers how to put it back *before* it acts (so a step that
half-fails is also undone). When a :class:`~vgpukit.errors.VgpukitError` escapes, the undo actions
run newest first and the error is re-raised, same class and fields, with "rolled back N steps"
appended (and any undo that failed named, so the operator knows what to look at).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from ..errors import VgpukitError

log = logging.getLogger("vgpukit.sriov")


@dataclass
class Transaction:
    undo: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    done: list[str] = field(default_factory=list)

    def on_failure(self, what: str, fn: Callable[[], None]) -> None:
        """Register how to revert the step about to run."""
        self.undo.append((what, fn))

    def record(self, what: str) -> None:
        self.done.append(what)

    def rollback(self) -> tuple[int, list[str]]:
        count, failures = 0, []
        while self.undo:
            what, fn = self.undo.pop()
            try:
                fn()
                count += 1
            except VgpukitError as exc:
                log.warning("rollback step failed: %s: %s", what, exc)
                failures.append(f"{what}: {exc}")
        return count, failures

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or not isinstance(exc, VgpukitError):
            return
        count, failures = self.rollback()
        note = f"rolled back {count} step{'s' if count != 1 else ''}"
        if failures:
            note += "; could NOT undo: " + "; ".join(failures)
        err = type(exc)(
            f"{exc.message}; {note}",
            path=exc.path,
            device=exc.device,
            value=exc.value,
            errno=exc.errno,
            hint=exc.hint,
        )
        raise err from exc
