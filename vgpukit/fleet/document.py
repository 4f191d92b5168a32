"""The ``vgpukit.host/v1`` document: several named host configs in one YAML file.

The file is checked against ``vgpukit/data/schemas/host.json`` while it is walked as YAML nodes, so
every error names its line (``FILE:LINE: ...``) and never quotes the file's content. Unknown keys
are refused. The ``mig-configs`` section is mig-parted's v1 format, read by mig-parted's own reader
(:func:`vgpukit.mig.config.parse`), so a mig-parted file is also a valid host document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..data import load_json
from ..errors import InvalidInput, NotFound
from ..inputs import Positions, load_yaml, positions
from ..mig import config as migconfig
from ..words import article

MAX_DOC_BYTES = 1024 * 1024
SCHEMA = "vgpukit.host/v1"
SAFE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}\Z", re.ASCII)
IDS = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{4}\Z", re.ASCII)  # a vendor:device filter
IDS_LIKE = re.compile(r"[0-9a-fA-F]{4}:[^\s:]*\Z", re.ASCII)  # written as one (a model name has no "15b3:...")


@dataclass(frozen=True)
class Selector:
    """Which device(s) an entry is about: ``device`` (alias, PCI address, mdev parent name) or
    ``match`` (``vendor:device`` in hex, or part of the model name). ``path``: where the entry is in
    the document (``("configs", NAME, "sriov", 0)``); ``fields``: its scalar values, to point an error
    about one of them at it."""

    device: str | None
    match: str | None
    line: int
    path: tuple[Any, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()

    def key_of(self, value: Any) -> str | None:
        """The entry's key whose value is ``value`` (as text, any case), if one is."""
        text = str(value).strip().lower()
        return next((k for k, v in self.fields if v.lower() == text), None)

    def describe(self) -> str:
        return self.device if self.device is not None else f"match {self.match}"


@dataclass(frozen=True)
class SriovWant:
    sel: Selector
    vfs: int
    driver: str


@dataclass(frozen=True)
class VfioWant:
    sel: Selector
    force: bool = False  # move it even when it is the console or in use (as ``bind --force``)


@dataclass(frozen=True)
class MdevWant:
    sel: Selector
    type: str
    count: int
    uuids: tuple[str, ...]


@dataclass(frozen=True)
class VgpuWant:
    sel: Selector
    type: str
    count: int


@dataclass
class HostConfig:
    """One selected config: what each area should look like (None / empty: the area is left alone)."""

    name: str | None
    source: str
    sriov: list[SriovWant] = field(default_factory=list)
    vfio: list[VfioWant] = field(default_factory=list)
    mdev: list[MdevWant] = field(default_factory=list)
    vgpu: list[VgpuWant] = field(default_factory=list)
    mig: list[migconfig.Entry] | None = None
    qos: dict[str, Any] | None = None
    remediation: dict[str, Any] | None = None  # the remediation policy (vgpukit.remedy.policy)
    mig_name: str | None = None  # the mig-configs name ``mig`` selects
    warnings: list[str] = field(default_factory=list)  # what mig-parted accepts silently (docs/mig.md)
    strict: bool = False  # such warnings refuse instead (--strict)
    line: int = 0  # where the config starts in the file: errors about the config as a whole name it
    path: tuple[Any, ...] = ()  # where the config is in the document (``("configs", NAME)``)
    places: Positions = field(default_factory=Positions)  # where each value of the document is

    def place(self, *path: Any) -> str:
        """``FILE:LINE:COLUMN`` of the value at ``path`` under the config (its nearest ancestor's when
        the document has no such value; the config's line when nothing is known)."""
        found = self.places.locate((*self.path, *path))
        return f"{self.source}:{found[0]}:{found[1]}" if found else f"{self.source}:{self.line}"


def _err(source: str, node: yaml.Node, msg: str) -> InvalidInput:
    return InvalidInput(f"{source}:{node.start_mark.line + 1}:{node.start_mark.column + 1}: {msg}", path=source)


def _value(node: yaml.Node) -> Any:
    return yaml.safe_load(yaml.serialize(node)) if isinstance(node, yaml.ScalarNode) else None


class _Map(dict[str, Any]):
    """A mapping of the document, with the line it starts on."""

    line = 0


def _line(item: Any) -> int:
    return item.line if isinstance(item, _Map) else 0


_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}


class _Walker:
    """Checks a YAML node tree against the JSON-schema subset host.json uses, with line numbers."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.schema: dict[str, Any] = load_json("schemas/host.json")
        self.config: str | None = None  # the config being checked: its errors name it

    def _err(self, node: yaml.Node, msg: str) -> InvalidInput:
        return _err(self.source, node, f"config {self.config}: {msg}" if self.config else msg)

    def _deref(self, s: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in s:
            s = {**self.schema["$defs"][s["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in s.items() if k != "$ref"}}
        return s

    def check(self, node: yaml.Node, s: dict[str, Any], what: str) -> Any:
        s = self._deref(s)
        if s.get("x-vgpukit-opaque"):
            if not isinstance(node, yaml.MappingNode):
                raise self._err(node, f"{what} must be a mapping")
            return yaml.safe_load(yaml.serialize(node))
        kind = s.get("type")
        if kind == "object":
            return self._object(node, s, what)
        if kind == "array":
            if not isinstance(node, yaml.SequenceNode):
                raise self._err(node, f"{what} must be a list")
            if len(node.value) > s.get("maxItems", 1 << 30):
                raise self._err(node, f"{what}: more than {s['maxItems']} items")
            return [self.check(item, s["items"], f"an item of {what}") for item in node.value]
        value = _value(node)
        if "enum" in s:
            if value not in s["enum"] or isinstance(value, bool):
                raise self._err(node, f"{what} must be one of {', '.join(map(str, s['enum']))}")
            return value
        if kind is not None:
            ok = _TYPES[kind]
            if not isinstance(value, ok) or (kind in ("integer", "number") and isinstance(value, bool)):
                raise self._err(node, f"{what} must be {article(kind)}")
        if "pattern" in s and not re.search(s["pattern"], value):
            raise self._err(node, f"{what} is not a valid name ({s.get('description', 'see the schema')})")
        if "minimum" in s and not s["minimum"] <= value <= s["maximum"]:
            raise self._err(node, f"{what} must be {s['minimum']}..{s['maximum']}")
        return value

    def _object(self, node: yaml.Node, s: dict[str, Any], what: str) -> dict[str, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise self._err(node, f"{what} must be a mapping")
        props: dict[str, Any] = s.get("properties", {})
        extra = s.get("additionalProperties", True)
        out = _Map()
        out.line = node.start_mark.line + 1
        for k, v in node.value:
            key = _value(k)
            if not isinstance(key, str):
                raise self._err(k, f"a key in {what} must be a plain name")
            if key in out:
                raise self._err(k, f"duplicate key in {what}")
            if key in props:
                out[key] = self.check(v, props[key], key)
            elif extra is False:
                raise self._err(k, f"unknown key in {what} (allowed: {', '.join(props)})")
            else:
                if "propertyNames" in s:
                    self.check(k, s["propertyNames"], f"a name in {what}")
                named = SAFE_NAME.match(key) is not None
                outer, self.config = self.config, key if named else None
                out[key] = self.check(v, extra, "the config" if named else "a config")
                self.config = outer
        if len(out) > s.get("maxProperties", 1 << 30):
            raise self._err(node, f"{what}: more than {s['maxProperties']} entries")
        missing = [r for r in s.get("required", []) if r not in out]
        if missing:
            raise self._err(node, f"{what} lacks {missing[0]!r}")
        return out


def _mig_lines(root: yaml.MappingNode) -> dict[str, int]:
    """Where each config under ``mig-configs`` starts (1-based lines)."""
    for k, v in root.value:
        if _value(k) == "mig-configs" and isinstance(v, yaml.MappingNode):
            return {str(_value(nk)): nk.start_mark.line + 1 for nk, _ in v.value}
    return {}


def _mig_configs(
    source: str, root: yaml.MappingNode, notes: list[migconfig.Note], lines: dict[str, int]
) -> dict[str, list[migconfig.Entry]]:
    """The ``mig-configs`` section of a host document, each config read by mig-parted's own entry reader
    (``lines``: where each starts)."""
    out: dict[str, list[migconfig.Entry]] = {}
    for k, v in root.value:
        if _value(k) != "mig-configs":
            continue
        for nk, nv in v.value:
            name = _value(nk)
            if not isinstance(name, str) or not SAFE_NAME.match(name):
                raise _err(source, nk, "a name under mig-configs must be a plain name (A-Z a-z 0-9 _ . + -)")
            if name in out:
                raise _err(source, nk, "duplicate key in mig-configs")
            out[name] = migconfig.parse_entries(nv, source, notes, name)
            lines[name] = nk.start_mark.line + 1
    return out


@dataclass
class Document:
    source: str
    configs: dict[str, dict[str, Any]]
    mig: dict[str, list[migconfig.Entry]]
    host_format: bool = True  # version vgpukit.host/v1 (False: a mig-parted v1 file)
    notes: list[migconfig.Note] = field(default_factory=list)  # mig-parted's leniencies, said out loud
    mig_lines: dict[str, int] = field(default_factory=dict)  # a mig-configs name -> its line
    places: Positions = field(default_factory=Positions)  # where each value of the document is

    def names(self) -> list[str]:
        """Selectable configs: those under ``configs``; in a mig-parted file, those under mig-configs."""
        return list(self.configs) if self.host_format else list(self.mig)

    def select(self, name: str | None, strict: bool = False) -> HostConfig:
        """Config ``name`` with the file's warnings (InvalidInput for one under ``strict``, or for one that
        refuses the mig-configs config it selects)."""
        cfg = self._select(name)
        cfg.strict = strict
        if cfg.mig is not None or self.notes:
            cfg.warnings = migconfig.screen(self.notes, cfg.mig_name, strict)
        return cfg

    def _select(self, name: str | None) -> HostConfig:
        names = self.names()
        shown = [n for n in names if SAFE_NAME.match(n)]
        if name is None:
            if len(names) != 1:
                raise InvalidInput(
                    f"{self.source} has {len(names)} configs: choose one with -c NAME (or VGPUKIT_HOST_CONFIG)",
                    hint=", ".join(shown) or None,
                )
            name = names[0]
        if name not in names:
            raise NotFound(f"no config {name!r} in {self.source}", hint=f"available: {', '.join(shown) or 'none'}")
        raw = self.configs.get(name)
        cfg = HostConfig(name, self.source, places=self.places)
        if raw is None:  # a mig-configs name: a MIG-only config
            cfg.mig, cfg.mig_name, cfg.line = self.mig[name], name, self.mig_lines.get(name, 0)
            cfg.path = ("mig-configs", name)
            return cfg
        cfg.line, cfg.path = _line(raw), ("configs", name)
        for i, item in enumerate(raw.get("sriov", [])):
            sel = self._sel(cfg, item, "device", ("sriov", i))
            cfg.sriov.append(SriovWant(sel, item["vfs"], item.get("driver", "default")))
        cfg.vfio = [
            VfioWant(self._sel(cfg, item, "device", ("vfio", i)), item.get("force", False))
            for i, item in enumerate(raw.get("vfio", []))
        ]
        for i, item in enumerate(raw.get("mdev", [])):
            uuids = tuple(u.lower() for u in item.get("uuids", []))
            if len(uuids) > item["count"] or len(set(uuids)) != len(uuids):
                most = item["count"]
                where = cfg.place("mdev", i, "uuids")
                raise InvalidInput(f"{where}: config {name}: uuids must be distinct and at most count ({most})")
            cfg.mdev.append(MdevWant(self._sel(cfg, item, "parent", ("mdev", i)), item["type"], item["count"], uuids))
        for i, item in enumerate(raw.get("vgpu", [])):
            cfg.vgpu.append(VgpuWant(self._sel(cfg, item, "device", ("vgpu", i)), item["type"], item["count"]))
        if "mig" in raw:
            if raw["mig"] not in self.mig:
                raise NotFound(f"{cfg.place('mig')}: config {name}: mig names no config under mig-configs")
            cfg.mig, cfg.mig_name = self.mig[raw["mig"]], raw["mig"]
        cfg.qos = raw.get("qos")
        cfg.remediation = raw.get("remediation")
        return cfg

    def _sel(self, cfg: HostConfig, item: dict[str, Any], key: str, path: tuple[Any, ...]) -> Selector:
        if (key in item) == ("match" in item):
            where = cfg.place(*path)
            raise InvalidInput(f"{where}: config {cfg.name}: give exactly one of {key!r} or 'match'")
        found = item.get("match")
        if isinstance(found, str) and IDS_LIKE.match(found) and not IDS.match(found):
            where = cfg.place(*path, "match")
            raise InvalidInput(
                f"{where}: config {cfg.name}: match: a vendor:device filter is 4 hex digits each (15b3:101b)"
            )
        fields = tuple((k, str(v)) for k, v in item.items() if isinstance(v, str | int) and not isinstance(v, bool))
        return Selector(item.get(key), item.get("match"), _line(item), (*cfg.path, *path), fields)


def parse(text: str, source: str) -> Document:
    """Check ``text`` (the file's content) and return its configs; any problem is one InvalidInput."""
    text = migconfig.yaml_text(text)  # a JSON file indented with tabs, as mig-parted reads it
    load_yaml(text, source, max_bytes=MAX_DOC_BYTES)  # size, syntax and nesting first: one line, no content
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        raise InvalidInput(f"{source}: empty document", path=source)
    walker = _Walker(source)
    doc = walker.check(root, walker.schema, "the document")
    assert isinstance(root, yaml.MappingNode)
    notes: list[migconfig.Note] = []
    lines: dict[str, int] = {}
    if doc["version"] == "v1":  # a mig-parted file: read by mig-parted's reader, with its leniencies
        if "configs" in doc or "mig-configs" not in doc:
            raise _err(
                source, root, "a version v1 (mig-parted) file has mig-configs only; configs needs vgpukit.host/v1"
            )
        mig = migconfig.parse_node(root, source, notes)
        lines = _mig_lines(root)
    else:
        mig = _mig_configs(source, root, notes, lines)
    return Document(source, doc.get("configs", {}), mig, doc["version"] == SCHEMA, notes, lines, positions(root))
