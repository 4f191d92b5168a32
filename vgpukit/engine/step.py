"""Steps: one typed change each, as data.

A plan is a list of :class:`Step` s built from read state without touching the host. Each step
knows how to describe itself (the ``--dry-run`` line and the ``--json`` plan entry come from the step
itself, never from a separate text), how to apply and verify itself, and how to compute, from the
live state just before it acts, the step that would put that state back (its *inverse*).

Inverses are written to the journal before the change and may be replayed after a crash whether or
not the forward step happened, so every inverse is an idempotent "ensure" (ensure 3 VFs, ensure this
mdev is absent, ensure this file holds these bytes), keyed by stable names (PCI addresses, UUIDs,
placements), never by ids the kernel or driver hands out at apply time.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, TypeVar

from ..errors import InvalidInput
from .env import Env

_KINDS: dict[str, type[Step]] = {}

# When the executor runs a step (``Step.stage``): BEFORE steps run first, before any change (a refusal
# there changes nothing: mdevctl's ``pre`` call-outs); CHANGE steps in plan order; AFTER steps once the
# change is committed (journal closed), their failures only logged (``post`` call-outs, notifiers).
BEFORE, CHANGE, AFTER = "before", "change", "after"
STAGES = (BEFORE, CHANGE, AFTER)
S = TypeVar("S", bound="type[Step]")


class Step:
    """Base class: subclasses are frozen dataclasses whose fields are JSON values."""

    kind: ClassVar[str] = ""
    stage: ClassVar[str] = CHANGE

    def describe(self) -> str:
        raise NotImplementedError

    def inverse(self, env: Env) -> Step | list[Step] | None:
        """The step(s) that put back what this step is about to change (read now, before apply)."""
        return None

    def batch(self) -> str:
        """A key shared by steps that may be journaled together: in a row, they act on distinct things
        and none changes what another's inverse reads, so all their inverses are read and journaled
        (one fsync) before the first of them applies. "" (the default): journaled on its own."""
        return ""

    def apply(self, env: Env) -> None:
        raise NotImplementedError

    def verify(self, env: Env) -> None:
        """Read back; raise :class:`~vgpukit.errors.VerifyFailed` when the change did not take."""

    def to_dict(self) -> dict[str, Any]:
        fields: dict[str, Any] = dataclasses.asdict(self) if dataclasses.is_dataclass(self) else {}
        return {"kind": self.kind, "text": self.describe(), **fields}


def step_kind(cls: S) -> S:
    """Register a step class under its ``kind`` so the journal can rebuild it."""
    kind = cls.kind
    if not kind or (kind in _KINDS and _KINDS[kind] is not cls):
        raise ValueError(f"step kind {kind!r} missing or registered twice")
    _KINDS[kind] = cls
    return cls


def from_dict(doc: dict[str, Any]) -> Step:
    """Rebuild a step from its journal entry (the modules that define step kinds must be imported)."""
    kind = doc.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise InvalidInput(f"journal entry of unknown kind {kind!r}")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    try:
        return cls(**{k: _tuples(v) for k, v in doc.items() if k in names})
    except TypeError as exc:
        raise InvalidInput(f"journal entry of kind {kind!r} is malformed: {exc}") from None


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples frozen dataclasses hold."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value
