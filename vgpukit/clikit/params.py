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


class DeviceName(Name):
    """A device name on the command line (checked like NAME). Shell completion offers the names the
    host has, from the one resolver's aliases (:func:`vgpukit.naming.aliases`): ``gpuN``/``nicN``/
    ``nvmeN``, PCI addresses, mdev parents, mdev UUIDs -- whichever ``kinds`` the argument takes."""

    def __init__(self, *kinds: str) -> None:
        self.kinds = frozenset(kinds)  # "pci" | "gpu" | "parent" | "mdev"

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        try:  # completion is silent: whatever goes wrong offers nothing
            names = host_names(ctx, self.kinds)
        except Exception:
            return []
        low = incomplete.strip().lower()
        out = []
        for name in names:
            if name.startswith(low):
                out.append(CompletionItem(name))
            elif name.startswith("0000:") and name[5:].startswith(low) and low:
                out.append(CompletionItem(name[5:]))  # the short form the user started typing
        return out


def host_names(ctx: click.Context, kinds: frozenset[str]) -> list[str]:
    """The names of the host (``--root``/``--sim`` or their environment variables), read-only."""
    from pathlib import Path

    from ..host import Host
    from ..naming import aliases
    from ..pci import Scan
    from .context import App

    top = ctx.find_root().params
    app = App.from_env(top.get("root"), top.get("sim"))
    host = Host(app.sim_dir or app.root or Path("/"))  # reads only: no simulated kernel is opened
    scan = Scan(host)
    names: list[str] = []
    if kinds & {"pci", "gpu"}:
        named = aliases(scan)
        gpus = "pci" not in kinds
        order = sorted(named.values(), key=lambda a: (a.rstrip("0123456789"), len(a), a))  # gpu2 before gpu10
        names += [a for a in order if not gpus or a.startswith("gpu")]
        names += sorted(b for b, a in named.items() if a.startswith("gpu")) if gpus else scan.bdfs()
    if "parent" in kinds:
        names += [p for p in host.listdir(host.mdev_parents()) if p not in names]
    if "mdev" in kinds:
        names += host.listdir(host.mdev_devices())
    return names


DEVICE = DeviceName("pci")  # a PCI function
GPU_DEVICE = DeviceName("gpu")  # a GPU
PARENT_DEVICE = DeviceName("parent")  # an mdev parent
VM_DEVICE = DeviceName("pci", "mdev")  # what goes to a VM: a PCI function or an mdev
