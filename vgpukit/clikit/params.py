"""Click parameter types over :mod:`vgpukit.inputs`: every number and name on the command line is
checked by the same rules as the files we read (ASCII digits, bounds, no control characters).
A refusal is a usage error: one line, exit 2."""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any, ClassVar

import click

from ..errors import InvalidInput
from ..host import MDEV_TYPES
from ..inputs import check_text, parse_float, parse_int, parse_size

if TYPE_CHECKING:
    from pathlib import Path

    from ..host import Host

    _Base = click.ParamType[Any]
else:
    _Base = click.ParamType  # generic only in newer click


def _what(param: click.Parameter | None, ctx: click.Context | None) -> str:
    return param.get_error_hint(ctx) if param is not None and ctx is not None else "value"


def _said(message: str, param: click.Parameter | None, ctx: click.Context | None) -> str:
    """``message`` without the option's name in front: click's ``Invalid value for '--memory':`` says it."""
    if param is None or ctx is None:
        return message
    return message.removeprefix(f"{_what(param, ctx)}: ").removeprefix(f"{_what(param, ctx)} ")


class AsciiInt(_Base):
    """ASCII digits within [lo, hi]; ``below``: what to say to a value under ``lo`` (the way to ask for
    less, as ``sriov disable`` for no VFs)."""

    name = "integer"

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "N"  # the metavar style (CONTRIBUTING.md): what the value is, never click's type name

    def __init__(self, lo: int | None = None, hi: int | None = None, below: str = "") -> None:
        self.lo, self.hi, self.below = lo, hi, below

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return parse_int(value, _what(param, ctx), lo=self.lo, hi=self.hi)
        except InvalidInput as err:
            low = self.below and isinstance(err.value, int) and self.lo is not None and err.value < self.lo
            said = _said(err.message, param, ctx)
            self.fail(f"{said} ({self.below})" if low else said, param, ctx)


class AsciiFloat(_Base):
    name = "number"

    def __init__(self, lo: float | None = None, hi: float | None = None) -> None:
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            return parse_float(value, _what(param, ctx), lo=self.lo, hi=self.hi)
        except InvalidInput as err:
            self.fail(_said(err.message, param, ctx), param, ctx)


class Size(_Base):
    """A byte count: digits with an optional K/M/G/T (KiB, MiB, GiB, TiB) suffix. With ``unit="MiB"``
    the value is in MiB (``lo``/``hi`` too) and plain digits mean MiB: ``8G``, ``8192M``, ``8192``."""

    name = "size"
    UNITS: ClassVar[dict[str, int]] = {"B": 0, "MiB": 20}

    def __init__(self, lo: int = 1, hi: int = 1 << 50, unit: str = "B") -> None:
        self.lo, self.hi, self.unit = lo, hi, unit

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        what = _what(param, ctx)
        shift = self.UNITS[self.unit]
        try:
            text = value.strip() if isinstance(value, str) else value
            if isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 40:
                text = int(text) << shift  # plain digits: the unit
            size = parse_size(text, what, lo=None, hi=None)
            if size & ((1 << shift) - 1):
                raise InvalidInput(f"{what} must be a whole number of {self.unit} (such as 512M or 8G)")
            # the bounds in bytes, said as every size is (``expected a size <= 1 PiB``: inputs.parse_size)
            return parse_size(size, what, lo=self.lo << shift, hi=self.hi << shift) >> shift
        except InvalidInput as err:
            self.fail(_said(err.message, param, ctx), param, ctx)


class Name(_Base):
    """Non-empty, single line, no control characters."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return check_text(value, _what(param, ctx))
        except InvalidInput as err:
            self.fail(_said(err.message, param, ctx), param, ctx)


NAME = Name()


class DeviceName(Name):
    """A device name on the command line (checked like NAME). Shell completion offers the names the
    host has, from the one resolver's aliases (:func:`vgpukit.naming.aliases`): ``gpuN``/``nicN``/
    ``nvmeN``, PCI addresses, mdev parents, mdev UUIDs -- whichever ``kinds`` the argument takes."""

    def __init__(self, *kinds: str) -> None:
        self.kinds = frozenset(kinds)  # "pci" | "pf" | "gpu" | "parent" | "mdev"

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


def completion_host(ctx: click.Context) -> tuple[Host, Path | None]:
    """The host a completion reads (``--root``/``--sim`` given earlier on the line, or their environment
    variables) through the host door, read-only, and the simulated host's directory if it is one."""
    from pathlib import Path

    from ..host import Host
    from .context import App

    top = ctx.find_root().params
    app = App.from_env(top.get("root"), top.get("sim"))
    return Host(app.sim_dir or app.root or Path("/")), app.sim_dir  # reads only: no simulated kernel is opened


def host_names(ctx: click.Context, kinds: frozenset[str]) -> list[str]:
    """The names of the host (``--root``/``--sim`` or their environment variables), read-only."""
    from ..naming import aliases
    from ..pci import Scan

    host, _ = completion_host(ctx)
    scan = Scan(host)
    names: list[str] = []
    if "pf" in kinds:  # SR-IOV capable physical functions
        pfs = {d.bdf for d in scan.devices() if d.sriov is not None and d.sriov.total_vfs > 0}
        named = aliases(scan)
        names += sorted((a for b, a in named.items() if b in pfs), key=lambda a: (a.rstrip("0123456789"), len(a), a))
        names += sorted(pfs)
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


def offer(names: list[str], incomplete: str, prefix: str = "") -> list[Any]:
    from click.shell_completion import CompletionItem

    return [CompletionItem(prefix + n) for n in names if n.startswith(incomplete)]


class MdevCreateArgs(Name):
    """``mdev create [PARENT] [TYPE]``: the host's mdev parents, then that parent's types."""

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        given = list(ctx.params.get(param.name or "") or ())
        try:
            if not given:
                return offer(host_names(ctx, frozenset({"parent"})), incomplete)
            if len(given) == 1:
                return offer(parent_types(ctx, given[0]), incomplete)
        except Exception:  # completion is silent
            pass
        return []


def parent_types(ctx: click.Context, name: str) -> list[str]:
    """The types of the mdev parent ``name`` (its mdev_bus name, a device name or a PCI address)."""
    from .. import naming

    host, _ = completion_host(ctx)
    t = naming.resolve(host, name, frozenset({naming.PARENT}))
    assert t.parent is not None
    return host.listdir(host.mdev_parent(t.parent, MDEV_TYPES))


class MigProfiles(Name):
    """``--mig 3g.20gb,1g.5gb=2``: completes the last profile of the list with the GPU's profiles."""

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        head, _, last = incomplete.rpartition(",")
        try:
            # the GPU argument; while this option's value is incomplete click leaves it unparsed in ctx.args
            gpu = ctx.params.get("gpu") or next(iter(ctx.args), "")
            names = gpu_profiles(ctx, str(gpu))
        except Exception:  # completion is silent
            return []
        return offer(names, last, head + "," if head else "")


def gpu_profiles(ctx: click.Context, gpu: str) -> list[str]:
    """The MIG profile names of the GPU the command line names (through NVML, simulated on a sim host)."""
    from .. import naming

    host, sim_dir = completion_host(ctx)
    wiring = ctx.find_root().obj  # the command line's wiring (vgpukit.wiring), given to the root context
    nvml = wiring.open_nvml(sim_dir) if hasattr(wiring, "open_nvml") else None
    if nvml is None or not gpu:
        return []
    try:
        t = naming.resolve(host, gpu, frozenset({naming.GPU}), nvml=nvml)
        assert t.nvml_index is not None
        return [p.name for p in nvml.gi_profiles(t.nvml_index)]
    finally:
        nvml.close()


DEVICE = DeviceName("pci")  # a PCI function
PF_DEVICE = DeviceName("pf")  # an SR-IOV capable physical function
MDEV_DEVICE = DeviceName("mdev")  # an mdev instance's UUID
GPU_DEVICE = DeviceName("gpu")  # a GPU
PARENT_DEVICE = DeviceName("parent")  # an mdev parent
VM_DEVICE = DeviceName("pci", "mdev")  # what goes to a VM: a PCI function or an mdev


class Listen(_Base):
    name = "listen"

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "ADDRESS"  # ADDR:PORT (the help says so)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, int]:
        if isinstance(value, tuple):
            return value
        try:
            return parse_listen(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` (``:PORT`` all addresses, ``[v6]:PORT``) -> (address, port); ValueError: why."""
    addr, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError("expected ADDR:PORT (or :PORT)")
    try:
        port = parse_int(port_text, "port", lo=1, hi=65535)
    except InvalidInput as exc:
        raise ValueError("the port must be a number from 1 to 65535") from exc
    if addr.startswith("[") and addr.endswith("]"):
        try:
            return str(ipaddress.IPv6Address(addr[1:-1])), port
        except ValueError as exc:
            raise ValueError("not an IPv6 address between the brackets") from exc
    if addr == "":
        return "", port
    if ":" in addr:
        raise ValueError("an IPv6 address goes between brackets: [::1]:PORT")
    if not addr.isascii() or _HOSTNAME.match(addr) is None:
        raise ValueError("not an address or a host name")
    return addr, port
