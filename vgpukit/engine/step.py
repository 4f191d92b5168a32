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
import importlib
import importlib.util
import re
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from ..errors import InvalidInput
from .env import Env

_KINDS: dict[str, type[Step]] = {}

# When the executor runs a step (``Step.stage``): BEFORE steps run first, before any change (a refusal
# there changes nothing: mdevctl's ``pre`` call-outs); CHANGE steps in plan order; AFTER steps once the
# change is committed (journal closed), their failures only logged (``post`` call-outs, notifiers).
BEFORE, CHANGE, AFTER = "before", "change", "after"
STAGES = (BEFORE, CHANGE, AFTER)
_MODULE = re.compile(r"vgpukit(\.[a-z_][a-z0-9_]*)+\Z")  # what a journal entry may name as its step's module
S = TypeVar("S", bound="type[Step]")
T = TypeVar("T")


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


class Observing(Step, Generic[T]):
    """A step that reads the state it changes once, tuned-style: :meth:`read` (the state before, what
    its inverse and its change start from), :meth:`undo` (the inverse, from that), :meth:`change`
    (apply, knowing it) and :meth:`check` (verify; returns what it read back, the state after).

    The executor calls these and keeps ``before`` and ``after`` in the run's
    :class:`~vgpukit.engine.outcome.Observed` of the step, which the front end renders. Called as a
    plain step (an inverse replayed by undo or recovery, a caller outside the executor), each phase
    reads afresh."""

    def read(self, env: Env) -> T:
        raise NotImplementedError

    def undo(self, before: T) -> Step | list[Step] | None:
        raise NotImplementedError

    def change(self, env: Env, before: T) -> None:
        raise NotImplementedError

    def check(self, env: Env, before: T) -> object:
        """Raise :class:`~vgpukit.errors.VerifyFailed` when the change did not take; else what was read
        back (None: nothing)."""
        return None

    def inverse(self, env: Env) -> Step | list[Step] | None:
        return self.undo(self.read(env))

    def apply(self, env: Env) -> None:
        self.change(env, self.read(env))

    def verify(self, env: Env) -> None:
        self.check(env, self.read(env))


Refresher = Callable[[Env], list["Step"]]  # a derived-file refresher (``Env.derived``)


def step_kind(cls: S) -> S:
    """Register a step class under its ``kind`` so the journal can rebuild it (defining modules register
    their steps on import; the engine names none of them)."""
    kind = cls.kind
    if not kind or (kind in _KINDS and _KINDS[kind] is not cls):
        raise ValueError(f"step kind {kind!r} missing or registered twice")
    _KINDS[kind] = cls
    return cls


def to_entry(step: Step) -> dict[str, Any]:
    """The journal entry of ``step``: its fields, and the module that defines it, which recovery in a
    fresh process imports to rebuild it."""
    return {**step.to_dict(), "module": type(step).__module__}


def from_dict(doc: dict[str, Any]) -> Step:
    """Rebuild a step from its journal entry; the module it names (a ``vgpukit.`` module, nothing
    else) is imported when the kind is not registered yet."""
    kind = doc.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None and isinstance(kind, str):
        cls = _load(kind, doc.get("module"))
    if cls is None:
        raise InvalidInput(f"journal entry of unknown kind {kind!r}")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    try:
        return cls(**{k: _tuples(v) for k, v in doc.items() if k in names})
    except TypeError as exc:
        raise InvalidInput(f"journal entry of kind {kind!r} is malformed: {exc}") from None


def _load(kind: str, module: object) -> type[Step] | None:
    """The step class of ``kind`` after importing ``module``, when it is a vgpukit module defining it.
    An entry without a module (journaled by an older vgpukit) imports every package's
    ``steps`` module, found on disk: the engine still names none."""
    if module is None:
        _import_every_steps_module()
        return _KINDS.get(kind)
    if not isinstance(module, str) or not _MODULE.match(module):
        return None
    try:
        importlib.import_module(module)
    except ImportError:
        return None
    cls = _KINDS.get(kind)
    return cls if cls is not None and cls.__module__ == module else None


def _import_every_steps_module() -> None:
    import pkgutil

    import vgpukit

    for info in pkgutil.iter_modules(vgpukit.__path__):
        if info.ispkg and importlib.util.find_spec(f"vgpukit.{info.name}.steps") is not None:
            importlib.import_module(f"vgpukit.{info.name}.steps")
    importlib.import_module(f"{__package__}.files")


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples frozen dataclasses hold."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value
