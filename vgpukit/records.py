"""Immutable value records for the hot read path: plain classes with ``__slots__``.

A frozen dataclass costs about 1 ms to create when its module is imported (its methods are
generated and compiled); the records every read command loads (NVML's GPUs, profiles, instances)
are created this way instead: the class lists its fields in ``__slots__`` and sets them in a typed
``__init__`` through :meth:`Record._init`; equality, hashing and ``repr`` come from the fields, and
assigning a field afterwards raises, as for a frozen dataclass (docs/decisions.md, "Start-up").
Where the order of the fields shows (``as_dict``, JSON documents), ``__slots__`` lists them in that
order (``# noqa: RUF023``).
"""

from __future__ import annotations

from typing import Any, Self


class Record:
    __slots__: tuple[str, ...] = ()

    def _init(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._values()))

    def as_dict(self) -> dict[str, Any]:
        """The fields in ``__slots__`` order, nested records as dicts, dicts and lists copied (as
        :func:`dataclasses.asdict`)."""
        return {name: _plain(getattr(self, name)) for name in self.__slots__}

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({shown})"

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (as :func:`dataclasses.replace`)."""
        new = object.__new__(type(self))
        for name in self.__slots__:
            object.__setattr__(new, name, changes.pop(name) if name in changes else getattr(self, name))
        if changes:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(changes)}")
        return new


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.as_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value
