"""mig-parted's v1 config format, parsed strictly (unknown keys rejected with their line).

::

    version: v1
    mig-configs:
      balanced:
        - devices: all            # or [0, 1] (NVML indices)
          device-filter: ["0x20B010DE"]   # optional: PCI device ids (device << 16 | vendor)
          mig-enabled: true
          mig-devices: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2, "1c.3g.20gb": 3}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..errors import InvalidInput
from ..inputs import load_yaml

TOP_KEYS = ("version", "mig-configs")
ENTRY_KEYS = ("devices", "device-filter", "mig-enabled", "mig-devices")
MAX_CONFIG_BYTES = 1024 * 1024
MAX_INDEX = 255  # NVML device indices
MAX_COUNT = 64  # MIG devices of one profile on one GPU (7 GIs x 7 CIs at most)
PROFILE_NAME = re.compile(r"[0-9A-Za-z.+]{1,32}\Z", re.ASCII)
SAFE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}\Z", re.ASCII)  # file content shown in messages only when plain


@dataclass
class Entry:
    line: int
    devices: list[int] | None  # None: all
    device_filter: list[int] | None
    mig_enabled: bool
    mig_devices: dict[str, int] = field(default_factory=dict)

    def selects(self, index: int, pci_device_id: int | None) -> bool:
        if self.devices is not None and index not in self.devices:
            return False
        return self.device_filter is None or pci_device_id in self.device_filter


def _err(source: str, node: yaml.Node, msg: str) -> InvalidInput:
    return InvalidInput(f"{source}:{node.start_mark.line + 1}: {msg}", path=source)


def _mapping(source: str, node: yaml.Node, what: str, allowed: tuple[str, ...] | None) -> dict[str, yaml.Node]:
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
    if not isinstance(node, yaml.ScalarNode):
        return None
    try:
        return yaml.safe_load(yaml.serialize(node))
    except (yaml.YAMLError, ValueError, OverflowError, TypeError):
        return None  # a scalar the resolver cannot build (e.g. a timestamp out of range)


_HEX = re.compile(r"(?:0[xX])?[0-9A-Fa-f]{1,8}\Z", re.ASCII)


def _ints(source: str, node: yaml.Node, what: str, hex_ok: bool = False) -> list[int]:
    """A number or a list of numbers: plain ASCII integers (NVML indices 0..255), or with
    ``hex_ok`` 32-bit PCI ids written in hex. ``2.7``, ``.inf``, ``true``, ``-1`` are refused."""
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    out = []
    for item in items:
        value = _scalar(item)
        if hex_ok and isinstance(value, str) and _HEX.match(value):
            out.append(int(value, 16))
        elif (hex_ok and type(value) is int and 0 <= value <= 0xFFFFFFFF) or (
            not hex_ok and type(value) is int and 0 <= value <= MAX_INDEX
        ):
            out.append(value)
        else:
            want = "a 32-bit PCI id in hex" if hex_ok else f"an NVML index 0..{MAX_INDEX}"
            raise _err(source, item, f"{what}: each item must be {want}")
    return out


def parse(text: str, source: str = "config") -> dict[str, list[Entry]]:
    load_yaml(text, source, max_bytes=MAX_CONFIG_BYTES)  # size, syntax, nesting: one line, no content
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        raise InvalidInput(f"{source}: empty config", path=source)
    top = _mapping(source, root, "the config", TOP_KEYS)
    if "version" not in top or _scalar(top["version"]) != "v1":
        raise _err(source, top.get("version", root), "version must be v1")
    if "mig-configs" not in top:
        raise _err(source, root, "missing mig-configs")
    configs: dict[str, list[Entry]] = {}
    for name, node in _mapping(source, top["mig-configs"], "mig-configs", None).items():
        if not isinstance(node, yaml.SequenceNode):
            raise _err(source, node, "each config under mig-configs must be a list of device entries")
        configs[name] = [_entry(source, item, name) for item in node.value]
    return configs


def _entry(source: str, node: yaml.Node, name: str) -> Entry:
    keys = _mapping(source, node, "a device entry", ENTRY_KEYS)
    for required in ("devices", "mig-enabled"):
        if required not in keys:
            raise _err(source, node, f"a device entry lacks {required!r}")
    dev = keys["devices"]
    devices = None if _scalar(dev) == "all" else _ints(source, dev, "devices")
    filt = _ints(source, keys["device-filter"], "device-filter", hex_ok=True) if "device-filter" in keys else None
    enabled = _scalar(keys["mig-enabled"])
    if not isinstance(enabled, bool):
        raise _err(source, keys["mig-enabled"], "mig-enabled must be true or false")
    mig_devices: dict[str, int] = {}
    if "mig-devices" in keys:
        for prof, count_node in _mapping(source, keys["mig-devices"], "mig-devices", None).items():
            if not PROFILE_NAME.match(prof):
                raise _err(source, count_node, "mig-devices: a key must be a MIG profile name like 3g.20gb")
            count = _scalar(count_node)
            if type(count) is not int or not 0 <= count <= MAX_COUNT:
                raise _err(source, count_node, f"mig-devices: a count must be an integer 0..{MAX_COUNT}")
            if count:
                mig_devices[prof] = count
    if mig_devices and not enabled:
        raise _err(source, keys["mig-devices"], "mig-devices given with mig-enabled: false")
    return Entry(node.start_mark.line + 1, devices, filt, enabled, mig_devices)


def dump(name: str, entries: list[dict[str, Any]]) -> str:
    return yaml.safe_dump({"version": "v1", "mig-configs": {name: entries}}, sort_keys=False)
