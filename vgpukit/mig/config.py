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

The rules are mig-parted's (``api/spec/v1``, ``pkg/types``, go-nvlib's MIG profile grammar): what
its reader refuses (in any config of the file: it reads them all) is refused with its line, exit 2.
What it accepts silently although it cannot mean what it says (a ``device-filter`` it cannot read, an
index no GPU has, a duplicate key, an empty ``mig-enabled``, a count no GPU holds in a config that is
not applied) is accepted as mig-parted reads it and said out loud: a :class:`Note` per problem,
naming the config and line (``--strict`` refuses them). A JSON file is read as mig-parted's YAML
reader reads it (tabs between tokens included). docs/mig.md has the table of every rule.

Public entry points (also used by ``vgpukit apply`` host documents): :func:`parse_file` (a whole
file: configs and notes), :func:`parse` (its configs), :func:`parse_node` (a composed YAML node holding
``version``/``mig-configs``), :func:`parse_entries` (one config's list of entries), :func:`select` (a
config by name) and :func:`screen` (the notes a command shows, or refuses).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import InvalidInput, NotFound
from ..inputs import load_yaml
from .grammar import DeviceId, MigName, parse_device_id, parse_mig_name

__all__ = ["DeviceId", "Entry", "MigFile", "MigName", "Note", "parse_device_id", "parse_mig_name"]

if TYPE_CHECKING:  # yaml is imported where a document is parsed: read-only commands never load it
    import yaml

TOP_KEYS = ("version", "mig-configs")
ENTRY_KEYS = ("devices", "device-filter", "mig-enabled", "mig-devices")
MAX_CONFIG_BYTES = 1024 * 1024
MAX_INDEX = 255  # NVML device indices
MAX_COUNT = 64  # MIG devices of one profile on one GPU (7 GIs x 7 CIs at most)
SAFE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}\Z", re.ASCII)  # file content shown in messages only when plain
GO_INT_MAX = (1 << 63) - 1  # Go's int: what mig-parted's reader takes for an index or a count


class Note(msgspec.Struct, frozen=True):
    """Something mig-parted's reader accepts that vgpukit says out loud: a warning, refused under --strict."""

    source: str
    line: int
    text: str
    config: str | None = None  # the named config it is in (None: the file as a whole)
    refuses_selected: bool = False  # exit 2 when its config is the one applied (mig-parted fails there too)

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}"
        if self.config is not None:
            where += f": config {self.config}" if SAFE_NAME.match(self.config) else ": a config"
        return f"{where}: {self.text}"


@dataclass
class MigFile:
    configs: dict[str, list[Entry]]
    notes: list[Note] = field(default_factory=list)


@dataclass
class _Reader:
    """Where the reader is (file, config) and the notes it took so far."""

    source: str
    notes: list[Note] = field(default_factory=list)
    config: str | None = None

    def note(self, node: yaml.Node, text: str, refuses_selected: bool = False) -> None:
        self.notes.append(Note(self.source, node.start_mark.line + 1, text, self.config, refuses_selected))


@dataclass
class Entry:
    line: int
    devices: list[int] | None  # None: all
    device_filter: list[DeviceId] | None  # None: every GPU
    mig_enabled: bool
    mig_devices: dict[str, int] = field(default_factory=dict)  # canonical name -> count (no zero counts)
    # (line, column) of the entry's values: "devices", "mig-enabled", "mig-devices", "profile:<name>"
    marks: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False)

    def place(self, source: str, *keys: str) -> str:
        """``FILE:LINE:COLUMN`` of the first of ``keys`` the entry has (else of the entry): where an
        error about that value points."""
        line, col = next((self.marks[k] for k in keys if k in self.marks), (self.line, self.marks.get("", (0, 1))[1]))
        return f"{source}:{line}:{col}"

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


def _mapping(r: _Reader | str, node: yaml.Node, what: str, allowed: tuple[str, ...] | None) -> dict[str, yaml.Node]:
    """A mapping's keys and values; a duplicate key counts as mig-parted's reader takes it: the last one,
    with a note (given a bare source name instead of a reader, a duplicate is refused)."""
    import yaml

    source = r if isinstance(r, str) else r.source
    if not isinstance(node, yaml.MappingNode):
        raise _err(source, node, f"{what} must be a mapping")
    out: dict[str, yaml.Node] = {}
    for k, v in node.value:
        if not isinstance(k, yaml.ScalarNode):
            raise _err(source, k, f"a key in {what} must be a plain name")
        key = str(k.value)
        if allowed is not None and key not in allowed:
            raise _err(source, k, f"unknown key in {what} (allowed: {', '.join(allowed)})")
        if key in out and isinstance(r, str):
            raise _err(source, k, f"duplicate key in {what}")
        if key in out and not isinstance(r, str):
            r.note(k, f"duplicate key in {what}: the last one counts (as in mig-parted), the earlier is ignored")
        out[key] = v
    return out


def _go_int(value: Any) -> int | None:
    """A number mig-parted's reader takes as a Go int (YAML goes through JSON: 2.0 is 2), else None."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        value = int(value)
    if type(value) is not int or not -GO_INT_MAX - 1 <= value <= GO_INT_MAX:
        return None
    return value


def _scalar(node: yaml.Node) -> Any:
    import yaml

    if not isinstance(node, yaml.ScalarNode):
        return None
    try:
        return yaml.safe_load(yaml.serialize(node))
    except (yaml.YAMLError, ValueError, OverflowError, TypeError):
        return None  # a scalar the resolver cannot build (e.g. a timestamp out of range)


def _filters(r: _Reader, node: yaml.Node) -> list[DeviceId] | None:
    """A string or a list of strings, as mig-parted reads them (None: no filter). An item mig-parted
    cannot read as a PCI id (a model name, ``20B010DE`` without 0x, a third ``:`` part) matches no GPU
    there: the same here, with a note. A non-string item (an unquoted number) fails its reader: refused."""
    import yaml

    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    if isinstance(node, yaml.ScalarNode) and _scalar(node) in ("", None):
        return None  # mig-parted: an empty (or null) filter string means no filter
    if not items:
        return None  # an empty list: no filter either
    out = []
    for item in items:
        value = _scalar(item)
        if not isinstance(value, str):
            raise _err(r.source, item, 'device-filter: each item must be a quoted string like "0x20B010DE"')
        try:
            out.append(parse_device_id(value))
        except ValueError:
            r.note(
                item,
                "device-filter: not a PCI id mig-parted can read, so it matches no GPU (there and here; write"
                ' "0x<device><vendor>" like "0x20B010DE", optionally ":0x<subsystem device><subsystem vendor>")',
            )
    return out  # every item unreadable: an empty list, which matches no GPU


def _indices(r: _Reader, node: yaml.Node) -> list[int] | None:
    """``all`` (None) or a list of integers; one no GPU can have (negative, over 255) matches none, as in
    mig-parted (a note says so)."""
    import yaml

    if isinstance(node, yaml.ScalarNode):
        if _scalar(node) == "all":
            return None
        raise _err(r.source, node, 'devices must be "all" or a list of NVML indices like [0, 1]')
    if not isinstance(node, yaml.SequenceNode):
        raise _err(r.source, node, 'devices must be "all" or a list of NVML indices like [0, 1]')
    out = []
    for item in node.value:
        value = _go_int(_scalar(item))
        if value is None:
            raise _err(r.source, item, f"devices: each item must be an NVML index 0..{MAX_INDEX}")
        if not 0 <= value <= MAX_INDEX:
            r.note(item, f"devices: an index outside 0..{MAX_INDEX} matches no GPU (there is no such NVML index)")
        out.append(value)
    return out


def yaml_text(text: str) -> str:
    """``text`` as PyYAML can read it. mig-parted's YAML reader (libyaml's rules) takes tabs between
    tokens inside ``{...}`` and ``[...]``, so a JSON file indented with tabs is a config there; PyYAML
    refuses any tab before a token. A text that is JSON has tabs only between tokens (JSON strings
    cannot hold a raw tab), so for JSON they become spaces: same meaning, same line numbers."""
    if "\t" not in text or not text.lstrip().startswith(("{", "[")):
        return text
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return text  # not JSON: PyYAML's own error says where
    return text.replace("\t", " ")


def parse_file(text: str, source: str = "config") -> MigFile:
    """A whole mig-parted v1 file (YAML or JSON): its configs in file order, and its notes."""
    import yaml

    text = yaml_text(text)
    load_yaml(text, source, max_bytes=MAX_CONFIG_BYTES)  # size, syntax, nesting: one line, no content
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        raise InvalidInput(f"{source}: empty config", path=source)
    notes: list[Note] = []
    return MigFile(parse_node(root, source, notes), notes)


def parse(text: str, source: str = "config") -> dict[str, list[Entry]]:
    """A whole mig-parted v1 file: config name -> its entries, in file order (notes: :func:`parse_file`)."""
    return parse_file(text, source).configs


def parse_node(root: yaml.Node, source: str, notes: list[Note] | None = None) -> dict[str, list[Entry]]:
    """The mapping holding ``version: v1`` and ``mig-configs`` (composed YAML, for its line numbers)."""
    r = _Reader(source, notes if notes is not None else [])
    top = _mapping(r, root, "the config", TOP_KEYS)
    if "version" not in top or _scalar(top["version"]) != "v1":
        raise _err(source, top.get("version", root), "version must be v1")
    if "mig-configs" not in top:
        raise _err(source, root, "missing mig-configs")
    configs: dict[str, list[Entry]] = {}
    r.config = None
    items = _mapping(r, top["mig-configs"], "mig-configs", None)
    if not items:
        raise _err(source, top["mig-configs"], "mig-configs needs at least one config")
    for name, node in items.items():
        configs[name] = parse_entries(node, source, r.notes, name)
    return configs


def parse_entries(
    node: yaml.Node, source: str, notes: list[Note] | None = None, config: str | None = None
) -> list[Entry]:
    """One config (named ``config``): a non-empty list of device entries; its notes go to ``notes``."""
    import yaml

    if not isinstance(node, yaml.SequenceNode):
        raise _err(source, node, "each config under mig-configs must be a list of device entries")
    if not node.value:
        raise _err(source, node, "a config needs at least one device entry")
    r = _Reader(source, notes if notes is not None else [], config)
    return [_entry(r, item) for item in node.value]


def _entry(r: _Reader, node: yaml.Node) -> Entry:
    import yaml

    source = r.source
    keys = _mapping(r, node, "a device entry", ENTRY_KEYS)
    for required in ("devices", "mig-enabled"):
        if required not in keys:
            raise _err(source, node, f"a device entry lacks {required!r}")
    devices = _indices(r, keys["devices"])
    filt = _filters(r, keys["device-filter"]) if "device-filter" in keys else None
    enabled = _scalar(keys["mig-enabled"])
    if enabled is None and isinstance(keys["mig-enabled"], yaml.ScalarNode):
        r.note(keys["mig-enabled"], "mig-enabled is empty: read as false, as mig-parted reads it")
        enabled = False
    if not isinstance(enabled, bool):
        raise _err(source, keys["mig-enabled"], "mig-enabled must be true or false")
    mig_devices: dict[str, int] = {}
    marks = {"": _mark(node), **{k: _mark(v) for k, v in keys.items()}}
    given = "mig-devices" in keys and not (
        _scalar(keys["mig-devices"]) is None and isinstance(keys["mig-devices"], yaml.ScalarNode)
    )
    if enabled and not given:
        raise _err(source, node, "mig-devices is required when mig-enabled is true ({} for none)")
    if given:
        counts = _mapping(r, keys["mig-devices"], "mig-devices", None)
        for prof, count_node in counts.items():
            try:
                name = str(parse_mig_name(prof))
            except ValueError:
                raise _err(
                    source, count_node, "mig-devices: a key must be a MIG device name like 3g.20gb or 1c.3g.20gb"
                ) from None
            marks[f"profile:{name}"] = _mark(count_node)
            count = _go_int(_scalar(count_node))
            if count is None or count < 0:
                raise _err(source, count_node, f"mig-devices: a count must be an integer 0..{MAX_COUNT}")
            if count > MAX_COUNT:
                r.note(count_node, f"mig-devices: a count over {MAX_COUNT} can never fit a GPU", refuses_selected=True)
            if count:
                mig_devices[name] = mig_devices.get(name, 0) + count
        if counts and not mig_devices:
            raise _err(source, keys["mig-devices"], "mig-devices: all counts are 0")
        if mig_devices and not enabled:
            raise _err(source, keys["mig-devices"], "mig-devices given with mig-enabled: false")
    return Entry(node.start_mark.line + 1, devices, filt, enabled, mig_devices, marks)


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


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


def screen(notes: Sequence[Note], selected: str | None, strict: bool) -> list[str]:
    """The warning lines a command applying config ``selected`` shows (every note of the file). Raises
    InvalidInput for a note that refuses the selected config, and under ``strict`` for any note."""
    for n in notes:
        if n.refuses_selected and n.config == selected:
            raise InvalidInput(str(n))
    if strict and notes:
        more = f" (and {len(notes) - 1} more)" if len(notes) > 1 else ""
        raise InvalidInput(f"{notes[0]}{more}", hint="refused under --strict; without it this is a warning")
    return [str(n) for n in notes]


def dump(name: str, entries: list[dict[str, Any]]) -> str:
    import yaml

    return yaml.safe_dump({"version": "v1", "mig-configs": {name: entries}}, sort_keys=False)
