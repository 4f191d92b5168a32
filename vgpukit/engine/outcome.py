"""What a run of the executor did, and what each step observed: the front end renders from this.

Each applied step gets one :class:`Observed`: the step, what it read before it acted (the state it
changed: what its inverse puts back) and what it read back after (its verify). A step that is not an
:class:`~vgpukit.engine.step.Observing` step says nothing (``None``, ``None``). The outcome belongs to
the run that made it: nothing of it outlives the command (per-command snapshots, not caches:
docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import msgspec

from .step import Step

S = TypeVar("S", bound=Step)


class Observed(msgspec.Struct, frozen=True):
    """One applied step: ``before``, the state it read before acting (None: it says nothing);
    ``after``, what its verify read back (None: nothing read back)."""

    step: Step
    before: object = None
    after: object = None


class Outcome(msgspec.Struct, frozen=True):
    """A run: ``done``, what was done in words (the plan lines of the steps applied; on a dry run, the
    plan); ``observed``, each applied step's :class:`Observed`, in the order they ran."""

    done: tuple[str, ...] = ()
    observed: tuple[Observed, ...] = ()

    def of(self, kind: type[S]) -> Iterator[tuple[S, Observed]]:
        """The observations of the steps of class ``kind`` (a subclass counts), in run order."""
        for seen in self.observed:
            if isinstance(seen.step, kind):
                yield seen.step, seen
