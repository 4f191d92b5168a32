"""Per-class and per-instance costs of the value-type idioms (docs/decisions.md, "Value types").

Usage: .venv/bin/python benchmarks/cli/values.py [--repeat N]

One 8-field immutable value type written three ways: the hand-written ``__slots__`` record
vgpukit used before issue 31 (copied here, as it was, to keep the comparison), a frozen dataclass
(``slots=True``) and a frozen ``msgspec.Struct``. The table: microseconds to define the class
(what importing a module pays per class), to make an instance, to compare two equal instances, to
hash one, to copy one with a field changed, and to encode one as JSON (``json.dumps`` of its
dict for the record and the dataclass, ``msgspec.json.encode`` for the Struct). Each figure is the
minimum over ``--repeat`` rounds (the least disturbed by other work on a shared machine).
A last line gives the cost of ``import msgspec`` in a fresh interpreter (minimum of the rounds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import timeit
from collections.abc import Callable
from typing import Any

import msgspec


class Record:
    """vgpukit.records.Record as it was (deleted by issue 31), for the comparison."""

    __slots__: tuple[str, ...] = ()

    def _init(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._values()))

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def replace(self, **changes: Any) -> Any:
        new = object.__new__(type(self))
        for name in self.__slots__:
            object.__setattr__(new, name, changes.pop(name) if name in changes else getattr(self, name))
        return new


def define_record() -> type:
    class R(Record):
        __slots__ = ("a", "b", "c", "d", "e", "f", "g", "h")

        def __init__(self, a: int, b: int, c: str, d: str, e: bool, f: int | None, g: float, h: str = "") -> None:
            self._init(a=a, b=b, c=c, d=d, e=e, f=f, g=g, h=h)

    return R


def define_dataclass() -> type:
    @dataclasses.dataclass(frozen=True, slots=True)
    class D:
        a: int
        b: int
        c: str
        d: str
        e: bool
        f: int | None
        g: float
        h: str = ""

    return D


def define_struct() -> type:
    class S(msgspec.Struct, frozen=True):
        a: int
        b: int
        c: str
        d: str
        e: bool
        f: int | None
        g: float
        h: str = ""

    return S


ARGS = (1, 2, "3g.20gb", "GPU-0", True, None, 1.5)


def best(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Microseconds per call, the minimum over ``repeat`` rounds of ``number`` calls."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def measure(kind: str, define: Callable[[], type], repeat: int) -> list[str]:
    cls = define()
    one, two = cls(*ARGS), cls(*ARGS)
    if kind == "record":
        encode: Callable[[], object] = lambda: json.dumps(one.as_dict())  # noqa: E731
        replace: Callable[[], object] = lambda: one.replace(a=7)  # noqa: E731
    elif kind == "dataclass":
        encode = lambda: json.dumps(dataclasses.asdict(one))  # noqa: E731
        replace = lambda: dataclasses.replace(one, a=7)  # noqa: E731
    else:
        encode = lambda: msgspec.json.encode(one)  # noqa: E731
        replace = lambda: msgspec.structs.replace(one, a=7)  # noqa: E731
    assert one == two and hash(one) == hash(two)
    figures = [
        best(define, 200, repeat),
        best(lambda: cls(*ARGS), 20000, repeat),
        best(lambda: one == two, 20000, repeat),
        best(lambda: hash(one), 20000, repeat),
        best(replace, 20000, repeat),
        best(encode, 20000, repeat),
    ]
    return [kind, *(f"{f:.2f}" for f in figures)]


def import_cost(repeat: int) -> float:
    code = "import time; t = time.perf_counter(); import msgspec; print(time.perf_counter() - t)"
    runs = []
    for _ in range(repeat):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        runs.append(float(done.stdout))
    return min(runs) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    repeat = parser.parse_args().repeat
    head = ["idiom (8 fields, frozen)", "define µs", "instance µs", "== µs", "hash µs", "replace µs", "to JSON µs"]
    rows = [head]
    for kind, define in (("record", define_record), ("dataclass", define_dataclass), ("msgspec.Struct", define_struct)):
        rows.append(measure(kind, define, repeat))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    print(f"import msgspec (fresh interpreter, min of {repeat}): {import_cost(repeat):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
