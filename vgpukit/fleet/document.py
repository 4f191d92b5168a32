"""The ``vgpukit.host/v1`` document: several named host configs in one YAML file.

The file is checked by its declaration (:mod:`vgpukit.fleet.declaration`, from which
``vgpukit/data/schemas/host.json`` is generated): every error names the line and column of the value
at fault (``FILE:LINE:COLUMN: config NAME: $.PATH: expected ...``, the places kept from PyYAML's node
tree) and never quotes the file's content. Unknown keys are refused. The ``mig-configs`` section is
mig-parted's v1 format, read by mig-parted's own reader (:func:`vgpukit.mig.config.parse`), so a
mig-parted file is also a valid host document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..declared import convert
from ..errors import InvalidInput, NotFound
from ..inputs import Positions, load_yaml, placed, positions, where_in
from ..mig import config as migconfig
from ..yaml_keys import json_path, key_twice
from .declaration import HostDoc

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
        return placed(self.source, found) if found else f"{self.source}:{self.line}"


def _err(source: str, node: yaml.Node, msg: str) -> InvalidInput:
    return InvalidInput(f"{placed(source, (node.start_mark.line + 1, node.start_mark.column + 1))}: {msg}", path=source)


def _value(node: yaml.Node) -> Any:
    return yaml.safe_load(yaml.serialize(node)) if isinstance(node, yaml.ScalarNode) else None


def _check(doc: Any, root: yaml.Node, source: str, places: Positions) -> None:
    """``doc`` as its declaration has it, else one InvalidInput at the place of the value at fault."""
    _no_duplicate_keys(root, source)
    try:
        convert(doc, HostDoc)
    except InvalidInput as err:
        path = where_in(err)
        name = path[1] if len(path) > 1 and path[0] == "configs" and isinstance(path[1], str) else None
        config = f"config {name}: " if name is not None and SAFE_NAME.match(name) else ""
        raise InvalidInput(f"{placed(source, places.locate(path) or (1, 1))}: {config}{err}", path=source) from None


def _no_duplicate_keys(root: yaml.Node, source: str) -> None:
    """A key written twice in one mapping is refused (:func:`~vgpukit.inputs.key_twice`); mig-configs is
    mig-parted's, whose leniencies its reader says (docs/mig.md)."""
    found = key_twice(root, lambda path, key: bool(path) or key != "mig-configs")
    if found is not None:
        path, k = found
        named = len(path) > 1 and path[0] == "configs" and SAFE_NAME.match(str(path[1]))
        raise _err(source, k, f"{f'config {path[1]}: ' if named else ''}{json_path(path)}: a key written twice")


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
        cfg.path = ("configs", name)
        cfg.line = self._line(cfg.path)
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
        return Selector(item.get(key), item.get("match"), self._line((*cfg.path, *path)), (*cfg.path, *path), fields)

    def _line(self, path: tuple[Any, ...]) -> int:
        found = self.places.locate(path)
        return found[0] if found else 0


def parse(text: str, source: str) -> Document:
    """Check ``text`` (the file's content) and return its configs; any problem is one InvalidInput."""
    text = migconfig.yaml_text(text)  # a JSON file indented with tabs, as mig-parted reads it
    doc = load_yaml(text, source, max_bytes=MAX_DOC_BYTES)  # size, syntax and nesting first: one line, no content
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        raise InvalidInput(f"{source}: empty document", path=source)
    places = positions(root)
    _check(doc, root, source, places)
    assert isinstance(root, yaml.MappingNode) and isinstance(doc, dict)
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
    return Document(source, doc.get("configs", {}), mig, doc["version"] == SCHEMA, notes, lines, places)
