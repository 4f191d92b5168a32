"""mig-parted's small grammars: a ``device-filter`` PCI id and a MIG device name (go-nvlib's).

Pure string parsing (ValueError when malformed); :mod:`vgpukit.mig.config` reads files with them.
"""

from __future__ import annotations

import re

import msgspec

_ATTR = re.compile(r"[A-Za-z.][A-Za-z0-9.]*\Z", re.ASCII)
_GO_INT = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)


class DeviceId(msgspec.Struct, frozen=True):
    """A ``device-filter`` item: PCI device and vendor, optionally the subsystem device and vendor."""

    device: int
    vendor: int
    subsystem: tuple[int, int] | None = None  # (subsystem device, subsystem vendor)

    def matches(self, hw: DeviceId) -> bool:
        """mig-parted's rule: device and vendor equal; the subsystem too when the filter names one."""
        if (self.device, self.vendor) != (hw.device, hw.vendor):
            return False
        return self.subsystem is None or self.subsystem == (hw.subsystem or (0, 0))

    def __str__(self) -> str:
        text = f"0x{self.device:04X}{self.vendor:04X}"
        if self.subsystem is not None:
            text += f":0x{self.subsystem[0]:04X}{self.subsystem[1]:04X}"
        return text

    @property
    def primary(self) -> DeviceId:
        return DeviceId(self.device, self.vendor)


class MigName(msgspec.Struct, frozen=True):
    """A MIG device name as go-nvlib parses it: ``[<c>c.]<g>g.<gb>gb[+attr,...|-attr,...]``."""

    c: int
    g: int
    gb: int
    attrs: tuple[str, ...] = ()
    neg: tuple[str, ...] = ()

    def __str__(self) -> str:
        suffix = ("+" + ",".join(self.attrs)) if self.attrs else ""
        suffix = ("-" + ",".join(self.neg)) if self.neg else suffix
        base = f"{self.g}g.{self.gb}gb" if self.c == self.g else f"{self.c}c.{self.g}g.{self.gb}gb"
        return base + suffix

    def gi_matches(self, gi_profile_name: str) -> bool:
        """Whether a GPU-instance profile of the device (``3g.20gb``, ``1g.5gb+me``) is this name's GI."""
        try:
            p = parse_mig_name(gi_profile_name)
        except ValueError:
            return False
        return (p.g, p.gb, p.attrs, p.neg) == (self.g, self.gb, self.attrs, self.neg)


def _field(text: str, suffix: str) -> int:
    if text.strip() != text or not text.endswith(suffix) or not _GO_INT.match(text[: -len(suffix)]):
        raise ValueError(f"expected a number followed by {suffix!r}")
    return int(text[: -len(suffix)])


def parse_mig_name(name: str) -> MigName:
    """go-nvlib's grammar (case-sensitive; ``1c.1g.5gb`` is ``1g.5gb``); ValueError when malformed."""
    if not name:
        raise ValueError("empty profile name")
    plus, minus = name.split("+", 1), name.split("-", 1)
    if len(plus) == 2 and len(minus) == 2:
        raise ValueError("both '+' and '-' attributes")
    parts = plus if len(plus) == 2 else minus
    fields = parts[0].split(".", 2)
    if len(fields) == 3:
        c, g, gb = _field(fields[0], "c"), _field(fields[1], "g"), _field(fields[2], "gb")
    elif len(fields) == 2:
        g, gb = _field(fields[0], "g"), _field(fields[1], "gb")
        c = g
    else:
        raise ValueError("expected <g>g.<gb>gb or <c>c.<g>g.<gb>gb")
    attrs: tuple[str, ...] = ()
    if len(parts) == 2:
        items = parts[1].split(",")
        if len(set(items)) != len(items) or any(not _ATTR.match(a) or a.endswith(".") for a in items):
            raise ValueError("malformed attribute list")
        attrs = tuple(sorted(items))
    return MigName(c, g, gb, attrs if parts is plus else (), attrs if parts is minus and len(minus) == 2 else ())


def _go_uint32(text: str) -> int:
    """Go's ``strconv.ParseUint(s, 0, 32)``: 0x/0o/0b prefixes, a leading 0 is octal, else decimal."""
    low = text[:2].lower()
    base, body = {"0x": (16, text[2:]), "0o": (8, text[2:]), "0b": (2, text[2:])}.get(low, (10, text))
    if base == 10 and len(text) > 1 and text[0] == "0":
        base, body = 8, text[1:]
    digits = "0123456789abcdef"[:base]
    if not body or any(ch not in digits for ch in body.lower()) or not body.isascii():
        raise ValueError(text)
    value = int(body, base)
    if value > 0xFFFFFFFF:
        raise ValueError(text)
    return value


def parse_device_id(text: str) -> DeviceId:
    """``0x20B010DE`` or ``0x20B010DE:0x134F10DE`` (subsystem device+vendor); ValueError otherwise."""
    parts = text.split(":")
    if len(parts) > 2:
        raise ValueError(text)
    raw = _go_uint32(parts[0])
    sub = None
    if len(parts) == 2:
        s = _go_uint32(parts[1])
        sub = (s >> 16, s & 0xFFFF)
    return DeviceId(raw >> 16, raw & 0xFFFF, sub)
