"""XML as objects, in the style of virt-manager's ``virtinst.xmlbuilder``.

One class per XML element; it wraps that element's node (``self.node``). Each property is declared
once, with its XPath relative to the element and how its text converts to a Python value, and the
same declaration reads (parse) and writes (build, edit)::

    class PciHostdev(XMLBuilder):
        XML_NAME = "hostdev"
        managed = XMLProperty("./@managed", YESNO)

Reading a property absent from the XML gives ``None``; writing ``None`` removes the attribute (or
text) and the elements left empty by that. Setting creates the missing path. Everything the model
does not declare stays in the node untouched, so an element read from libvirt and written back
keeps what libvirt added (aliases, guest addresses).

Supported XPaths: ``./a/b/@attr`` (attribute), ``./a/b`` (text), ``./@attr``; segments are plain
tag names.
"""

from __future__ import annotations

import copy
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import msgspec

from ..errors import InvalidInput

T = TypeVar("T")
B = TypeVar("B", bound="XMLBuilder")


class Codec(msgspec.Struct, Generic[T], frozen=True):
    """How a property's XML text maps to a value. ``parse`` raises ValueError on bad text."""

    parse: Callable[[str], T]
    format: Callable[[T], str]


def parse_c_uint(text: str) -> int:
    """An unsigned number as libvirt reads it (``strtoul`` base 0): ``0x3b``, ``59``, ``073``."""
    s = text.strip().lower()
    if s.startswith("0x"):
        return int(s[2:], 16)
    if len(s) > 1 and s.startswith("0"):
        return int(s[1:], 8)
    return int(s, 10)


def _yesno(text: str) -> bool:
    if text not in ("yes", "no"):
        raise ValueError(text)
    return text == "yes"


def _onoff(text: str) -> bool:
    if text not in ("on", "off"):
        raise ValueError(text)
    return text == "on"


STR: Codec[str] = Codec(str, str)
INT: Codec[int] = Codec(parse_c_uint, str)
YESNO: Codec[bool] = Codec(_yesno, lambda v: "yes" if v else "no")
ONOFF: Codec[bool] = Codec(_onoff, lambda v: "on" if v else "off")


def _split(xpath: str) -> tuple[list[str], str | None]:
    """``./a/b/@c`` -> (["a", "b"], "c"); ``./a/b`` -> (["a", "b"], None)."""
    parts = [p for p in xpath.removeprefix("./").split("/") if p and p != "."]
    attr = parts.pop()[1:] if parts and parts[-1].startswith("@") else None
    return parts, attr


def _find(node: ET.Element, tags: list[str]) -> ET.Element | None:
    return node.find("/".join(tags)) if tags else node


def _make(node: ET.Element, tags: list[str]) -> ET.Element:
    for tag in tags:
        child = node.find(tag)
        node = child if child is not None else ET.SubElement(node, tag)
    return node


def _prune(node: ET.Element, tags: list[str]) -> None:
    """Remove the elements of ``tags`` (deepest first) that are left without attributes, text or children."""
    for depth in range(len(tags), 0, -1):
        parent = _find(node, tags[: depth - 1])
        child = _find(node, tags[:depth])
        if parent is None or child is None or len(child) or child.attrib or (child.text or "").strip():
            return
        parent.remove(child)


def _parse_document(xml: str) -> ET.Element:
    if "<!DOCTYPE" in xml or "<!ENTITY" in xml:
        raise InvalidInput("XML with a document type or entity declarations is refused (libvirt writes none)")
    for _event, (prefix, uri) in ET.iterparse(io.StringIO(xml), events=("start-ns",)):
        if prefix and not re.fullmatch(r"ns\d+", prefix):
            ET.register_namespace(prefix, uri)  # written back with the file's own prefix, not ns0:
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True, insert_pis=True))
    parser.feed(xml)
    root: ET.Element = parser.close()
    return root


class XMLProperty(Generic[T]):
    """One value of an element, declared once with its XPath; a data descriptor on XMLBuilder classes."""

    def __init__(self, xpath: str, codec: Codec[T]) -> None:
        self.xpath = xpath
        self.tags, self.attr = _split(xpath)
        self.codec = codec

    def raw(self, obj: XMLBuilder) -> str | None:
        el = _find(obj.node, self.tags)
        if el is None:
            return None
        return el.get(self.attr) if self.attr else el.text

    def __get__(self, obj: XMLBuilder | None, owner: type | None = None) -> T | None:
        assert obj is not None, "XMLProperty is read on instances"
        text = self.raw(obj)
        if text is None:
            return None
        try:
            return self.codec.parse(text)
        except ValueError:
            return None  # libvirt would not have stored it; for us it is just not there

    def __set__(self, obj: XMLBuilder, value: T | None) -> None:
        if value is None:
            el = _find(obj.node, self.tags)
            if el is not None:
                if self.attr:
                    el.attrib.pop(self.attr, None)
                else:
                    el.text = None
                _prune(obj.node, self.tags)
            return
        el = _make(obj.node, self.tags)
        if self.attr:
            el.set(self.attr, self.codec.format(value))
        else:
            el.text = self.codec.format(value)


class XMLChildProperty(Generic[B]):
    """A child element with its own class: ``address = XMLChildProperty(PciAddress, "./source")``."""

    def __init__(self, cls: type[B], parent: str = ".") -> None:
        self.cls = cls
        self.tags, _ = _split(parent)

    def __get__(self, obj: XMLBuilder | None, owner: type | None = None) -> B | None:
        assert obj is not None, "XMLChildProperty is read on instances"
        el = _find(obj.node, [*self.tags, self.cls.XML_NAME])
        return None if el is None else self.cls.wrap(el)

    def __set__(self, obj: XMLBuilder, value: B | None) -> None:
        parent = _find(obj.node, self.tags)
        old = _find(obj.node, [*self.tags, self.cls.XML_NAME])
        if parent is not None and old is not None:
            parent.remove(old)
        if value is not None:
            _make(obj.node, self.tags).append(copy.deepcopy(value.node))  # never shared between parents
        else:
            _prune(obj.node, self.tags)


class XMLBuilder:
    """Base of every element class: a node, the properties declared on the class, a writer."""

    XML_NAME: ClassVar[str] = ""

    node: ET.Element

    @classmethod
    def wrap(cls: type[B], node: ET.Element) -> B:
        """The object over an existing node (parsing); no defaults are written."""
        obj = cls.__new__(cls)
        obj.node = node
        return obj

    @classmethod
    def blank(cls: type[B]) -> B:
        return cls.wrap(ET.Element(cls.XML_NAME))

    @classmethod
    def parse(cls: type[B], xml: str, *, document: bool = False) -> B:
        """Parse XML text whose root is this element. InvalidInput (without the text) otherwise.

        ``document``: a user's file to be written back: its comments stay, its namespace prefixes
        (``qemu:``) are written as they were, and DTDs (entities, a document type) are refused (libvirt
        writes none; they would only serve to expand text)."""
        try:
            root = _parse_document(xml) if document else ET.fromstring(xml)
        except ET.ParseError as exc:
            raise InvalidInput(f"cannot parse <{cls.XML_NAME}> XML: {exc}") from exc
        if root.tag != cls.XML_NAME:
            raise InvalidInput(f"expected a <{cls.XML_NAME}> element, got <{root.tag}>")
        return cls.wrap(root)

    def to_xml(self, *, indent: bool = False) -> str:
        """The element as XML text (ElementTree's spelling; templates write the human-facing form).
        ``indent``: two spaces per level, for people (only white space between elements changes)."""
        if indent:
            ET.indent(self.node, space="  ")
        return ET.tostring(self.node, encoding="unicode")

    def properties(self) -> dict[str, Any]:
        """Every declared property's current value (``XMLChildProperty`` values as nested dicts)."""
        out: dict[str, Any] = {}
        for klass in reversed(type(self).__mro__):
            for name, prop in vars(klass).items():
                if isinstance(prop, XMLProperty):
                    out[name] = getattr(self, name)
                elif isinstance(prop, XMLChildProperty):
                    child = getattr(self, name)
                    out[name] = None if child is None else child.properties()
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, XMLBuilder) and type(other) is type(self) and self.properties() == other.properties()

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(sorted(self.properties().items()))))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.properties().items() if v is not None)
        return f"{type(self).__name__}({fields})"
