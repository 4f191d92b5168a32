"""Click parameter types over :mod:`vgpukit.inputs`: every number and name on the command line is
checked by the same rules as the files we read (ASCII digits, bounds, no control characters).
A refusal is a usage error: one line, exit 2."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..errors import InvalidInput
from ..inputs import check_text, parse_float, parse_int, parse_size

if TYPE_CHECKING:
    _Base = click.ParamType[Any]
else:
    _Base = click.ParamType  # generic only in newer click


def _what(param: click.Parameter | None, ctx: click.Context | None) -> str:
    return param.get_error_hint(ctx) if param is not None and ctx is not None else "value"


class AsciiInt(_Base):
    name = "integer"

    def __init__(self, lo: int | None = None, hi: int | None = None) -> None:
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return parse_int(value, _what(param, ctx), lo=self.lo, hi=self.hi)
        except InvalidInput as err:
            self.fail(err.message, param, ctx)


class AsciiFloat(_Base):
    name = "number"

    def __init__(self, lo: float | None = None, hi: float | None = None) -> None:
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            return parse_float(value, _what(param, ctx), lo=self.lo, hi=self.hi)
        except InvalidInput as err:
            self.fail(err.message, param, ctx)


class Size(_Base):
    """A byte count: digits with an optional K/M/G/T (KiB, MiB, GiB, TiB) suffix."""

    name = "size"

    def __init__(self, lo: int = 1, hi: int = 1 << 50) -> None:
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return parse_size(value, _what(param, ctx), lo=self.lo, hi=self.hi)
        except InvalidInput as err:
            self.fail(err.message, param, ctx)


class Name(_Base):
    """Non-empty, single line, no control characters."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return check_text(value, _what(param, ctx))
        except InvalidInput as err:
            self.fail(err.message, param, ctx)


NAME = Name()
