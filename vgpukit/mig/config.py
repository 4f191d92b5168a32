"""mig-parted's v1 config format, parsed strictly (unknown keys rejected with their line).

::

    version: v1
    mig-configs:
      balanced:
        - devices: all            # or [0, 1] (NVML indices)
          device-filter: ["0x20B010DE"]   # optional: PCI ids (device << 16 | vendor), string or list;
                                          # "0x20B010DE:0x134F10DE" also names the subsystem
          mig-enabled: true
          mig-devices: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2, "1c.3g.20gb": 3}

The rules are mig-parted's (``api/spec/v1``, ``pkg/types``, go-nvlib's MIG profile grammar); where
mig-parted would silently match nothing (a model name or malformed id in ``device-filter``) the file
is refused with its line instead. docs/mig.md has the table of every rule.

Public entry points (also used by ``vgpukit apply`` host documents): :func:`parse` (a whole file),
:func:`parse_node` (a composed YAML node holding ``version``/``mig-configs``), :func:`parse_entries`
(one config's list of entries) and :func:`select` (a config by name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, NotFound
from ..inputs import load_yaml

if TYPE_CHECKING:  # yaml is imported where a document is parsed: read-only commands never load it
    import yaml

TOP_KEYS = ("version", "mig-configs")
ENTRY_KEYS = ("devices", "device-filter", "mig-enabled", "mig-devices")
MAX_CONFIG_BYTES = 1024 * 1024
MAX_INDEX = 255  # NVML device indices
MAX_COUNT = 64  # MIG devices of one profile on one GPU (7 GIs x 7 CIs at most)
SAFE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}\Z", re.ASCII)  # file content shown in messages only when plain
_ATTR = re.compile(r"[A-Za-z.][A-Za-z0-9.]*\Z", re.ASCII)
_GO_INT = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)


@dataclass(frozen=True)
class DeviceId:
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


@dataclass(frozen=True)
class MigName:
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


@dataclass
class Entry:
    line: int
    devices: list[int] | None  # None: all
    device_filter: list[DeviceId] | None  # None: every GPU
    mig_enabled: bool
    mig_devices: dict[str, int] = field(default_factory=dict)  # canonical name -> count (no zero counts)

    @property
    def all_devices(self) -> bool:
        return self.devices is None

    def selects(self, index: int, device_id: DeviceId | int | None) -> bool:
        """mig-parted's walk: the GPU at NVML ``index`` with PCI id ``device_id`` (a DeviceId, or the
        packed ``device << 16 | vendor`` NVML reports) passes the filter and the device list."""
        if self.devices is not None and index not in self.devices:
            return False
        if self.device_filter is None:
            return True
        if device_id is None:
            return False
        hw = device_id if isinstance(device_id, DeviceId) else DeviceId(device_id >> 16, device_id & 0xFFFF)
        return any(f.matches(hw) for f in self.device_filter)

    def wanted(self) -> dict[MigName, int]:
        return {parse_mig_name(k): v for k, v in self.mig_devices.items()}


def _err(source: str, node: yaml.Node, msg: str) -> InvalidInput:
    return InvalidInput(f"{source}:{node.start_mark.line + 1}: {msg}", path=source)


def _mapping(source: str, node: yaml.Node, what: str, allowed: tuple[str, ...] | None) -> dict[str, yaml.Node]:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise _err(source, node, f"{what} must be a mapping")
    out: dict[str, yaml.Node] = {}
    for k, v in node.value:
        if not isinstance(k, yaml.ScalarNode):
            raise _err(source, k, f"a key in {what} must be a plain name")
        key = str(k.value)
        if allowed is not None and key not in allowed:
            raise _err(source, k, f"unknown key in {what} (allowed: {', '.join(allowed)})")
        if key in out:
            raise _err(source, k, f"duplicate key in {what}")
        out[key] = v
    return out


def _scalar(node: yaml.Node) -> Any:
    import yaml

    if not isinstance(node, yaml.ScalarNode):
        return None
    try:
        return yaml.safe_load(yaml.serialize(node))
    except (yaml.YAMLError, ValueError, OverflowError, TypeError):
        return None  # a scalar the resolver cannot build (e.g. a timestamp out of range)


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


def _filters(source: str, node: yaml.Node) -> list[DeviceId] | None:
    """A string or a list of strings, as mig-parted reads them; an item mig-parted could not read
    (a model name, an unquoted number, ``20B010DE`` without 0x) would match nothing there: refused."""
    import yaml

    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    if isinstance(node, yaml.ScalarNode) and _scalar(node) == "":
        return None  # mig-parted: an empty filter string means no filter
    out = []
    for item in items:
        value = _scalar(item)
        if not isinstance(value, str):
            raise _err(source, item, 'device-filter: each item must be a quoted string like "0x20B010DE"')
        try:
            out.append(parse_device_id(value))
        except ValueError:
            raise _err(
                source,
                item,
                'device-filter: not a PCI id mig-parted can match (write "0x<device><vendor>", e.g. "0x20B010DE",'
                ' optionally ":0x<subsystem device><subsystem vendor>"; a model name matches nothing there)',
            ) from None
    return out or None


def _indices(source: str, node: yaml.Node) -> list[int] | None:
    import yaml

    if isinstance(node, yaml.ScalarNode):
        if _scalar(node) == "all":
            return None
        raise _err(source, node, 'devices must be "all" or a list of NVML indices like [0, 1]')
    if not isinstance(node, yaml.SequenceNode):
        raise _err(source, node, 'devices must be "all" or a list of NVML indices like [0, 1]')
    out = []
    for item in node.value:
        value = _scalar(item)
        if type(value) is not int or not 0 <= value <= MAX_INDEX:
            raise _err(source, item, f"devices: each item must be an NVML index 0..{MAX_INDEX}")
        out.append(value)
    return out


def parse(text: str, source: str = "config") -> dict[str, list[Entry]]:
    """A whole mig-parted v1 file: config name -> its entries, in file order."""
    import yaml

    load_yaml(text, source, max_bytes=MAX_CONFIG_BYTES)  # size, syntax, nesting: one line, no content
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        raise InvalidInput(f"{source}: empty config", path=source)
    return parse_node(root, source)


def parse_node(root: yaml.Node, source: str) -> dict[str, list[Entry]]:
    """The mapping holding ``version: v1`` and ``mig-configs`` (composed YAML, for its line numbers)."""
    top = _mapping(source, root, "the config", TOP_KEYS)
    if "version" not in top or _scalar(top["version"]) != "v1":
        raise _err(source, top.get("version", root), "version must be v1")
    if "mig-configs" not in top:
        raise _err(source, root, "missing mig-configs")
    configs: dict[str, list[Entry]] = {}
    items = _mapping(source, top["mig-configs"], "mig-configs", None)
    if not items:
        raise _err(source, top["mig-configs"], "mig-configs needs at least one config")
    for name, node in items.items():
        configs[name] = parse_entries(node, source)
    return configs


def parse_entries(node: yaml.Node, source: str) -> list[Entry]:
    """One config: a non-empty list of device entries."""
    import yaml

    if not isinstance(node, yaml.SequenceNode):
        raise _err(source, node, "each config under mig-configs must be a list of device entries")
    if not node.value:
        raise _err(source, node, "a config needs at least one device entry")
    return [_entry(source, item) for item in node.value]


def _entry(source: str, node: yaml.Node) -> Entry:
    import yaml

    keys = _mapping(source, node, "a device entry", ENTRY_KEYS)
    for required in ("devices", "mig-enabled"):
        if required not in keys:
            raise _err(source, node, f"a device entry lacks {required!r}")
    devices = _indices(source, keys["devices"])
    filt = _filters(source, keys["device-filter"]) if "device-filter" in keys else None
    enabled = _scalar(keys["mig-enabled"])
    if not isinstance(enabled, bool):
        raise _err(source, keys["mig-enabled"], "mig-enabled must be true or false")
    mig_devices: dict[str, int] = {}
    given = "mig-devices" in keys and not (
        _scalar(keys["mig-devices"]) is None and isinstance(keys["mig-devices"], yaml.ScalarNode)
    )
    if enabled and not given:
        raise _err(source, node, "mig-devices is required when mig-enabled is true ({} for none)")
    if given:
        counts = _mapping(source, keys["mig-devices"], "mig-devices", None)
        for prof, count_node in counts.items():
            try:
                name = str(parse_mig_name(prof))
            except ValueError:
                raise _err(
                    source, count_node, "mig-devices: a key must be a MIG device name like 3g.20gb or 1c.3g.20gb"
                ) from None
            count = _scalar(count_node)
            if type(count) is not int or not 0 <= count <= MAX_COUNT:
                raise _err(source, count_node, f"mig-devices: a count must be an integer 0..{MAX_COUNT}")
            if count:
                mig_devices[name] = mig_devices.get(name, 0) + count
        if counts and not mig_devices:
            raise _err(source, keys["mig-devices"], "mig-devices: all counts are 0")
        if mig_devices and not enabled:
            raise _err(source, keys["mig-devices"], "mig-devices given with mig-enabled: false")
    return Entry(node.start_mark.line + 1, devices, filt, enabled, mig_devices)


def select(configs: dict[str, list[Entry]], name: str | None, source: str) -> tuple[str, list[Entry]]:
    """The selected config (mig-parted: ``-c`` may be left out when the file has exactly one)."""
    if name is None:
        if len(configs) == 1:
            return next(iter(configs.items()))
        names = [n for n in configs if SAFE_NAME.match(n)]
        raise InvalidInput(f"{source} has several configs: choose one with -c", hint=", ".join(names) or None)
    if name not in configs:
        names = [n for n in configs if SAFE_NAME.match(n)]  # names from the file, shown only when plain
        raise NotFound(f"no config {name!r} in {source}", hint=f"available: {', '.join(names) or 'none'}")
    return name, configs[name]


def dump(name: str, entries: list[dict[str, Any]]) -> str:
    import yaml

    return yaml.safe_dump({"version": "v1", "mig-configs": {name: entries}}, sort_keys=False)
