"""Input hygiene, once for every command and file format.

Everything a user or a file hands to vgpukit passes through here before it means anything:

* numbers are ASCII digits only (``int()`` would take ``٣`` or ``1_000``), with bounds;
* names (devices, parents, types, tenants) are non-empty and carry no control characters;
* JSON and YAML documents are size-capped and nesting-limited, and a parse failure says which file
  and where, never quoting the file's content;
* scalar types in config documents are strict (a ``bool`` is not an ``int``, ``2.7`` is not a count).

Every refusal is an :class:`~vgpukit.errors.InvalidInput` (exit 2) with one line of text.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import InvalidInput, VgpukitError
from .words import bytes_text
from .yaml_keys import Path, json_path, key_twice, scalar_key

if TYPE_CHECKING:  # fractions (and decimal) load only where a Kubernetes quantity is read
    from fractions import Fraction

MAX_DOC_BYTES = 4 * 1024 * 1024  # config files, definitions, state records
MAX_DEPTH = 32  # nesting of mappings/lists in any document we read
MAX_NAME = 255

_INT_RE = re.compile(r"-?[0-9]+\Z", re.ASCII)
_FLOAT_RE = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z", re.ASCII)


def parse_int(text: object, what: str, *, lo: int | None = None, hi: int | None = None) -> int:
    """An integer written in ASCII digits (optionally negative), within [lo, hi]."""
    if isinstance(text, bool):
        raise InvalidInput(f"{what} must be an integer, not a boolean")
    if isinstance(text, int):
        value = text
    elif isinstance(text, str) and _INT_RE.match(text) and len(text) <= 40:
        value = int(text)
    else:
        raise InvalidInput(f"{what} must be an integer written in ASCII digits", value=_shown(text))
    return check_range(value, what, lo=lo, hi=hi)


_SIZE_RE = re.compile(r"([0-9]{1,20})(?:\.([0-9]{1,20}))?([kmgtp](?:i|ib)?|b)?\Z", re.ASCII | re.IGNORECASE)
_SIZE_SHIFT = {"": 0, "b": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50}
SI_UNIT = re.compile(r"[0-9.]+[kmgtpe]b\Z", re.ASCII | re.IGNORECASE)
SIZE_FORMS = "a size such as 4G, 4GiB, 1.5G or 512M (binary: G = GiB = 2^30 bytes)"
# _SIZE_RE as a JSON Schema pattern, for the schemas that ship (no flags there; no spaces around it)
SIZE_PATTERN = r"^[0-9]{1,20}([.][0-9]{1,20})?([KkMmGgTtPp]([Ii][Bb]?)?|[Bb])?$"


def parse_size(text: object, what: str, *, lo: int | None = 0, hi: int | None = 1 << 50) -> int:
    """A byte count in vgpukit's own grammar (the command line, host configs, the QoS config;
    docs/cli.md, "Sizes"): an int, or ASCII digits (a decimal fraction allowed) with an optional unit
    ``K M G T P``, ``Ki``..., ``KiB``... (any case), every one binary, as QEMU's ``-m 4G`` and
    Docker's ``--memory 4g``; ``B`` or none: bytes. ``KB``/``MB``/``GB``/``TB`` are refused: they mean
    powers of 1000 elsewhere (Kubernetes' ``4G`` is 4*10^9, :func:`parse_k8s_quantity`)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return _size_in(text, what, lo, hi)
    if not isinstance(text, str) or not text.isascii() or len(text) > 48:
        raise InvalidInput(f"{what} must be {SIZE_FORMS}")
    s = text.strip()
    m = _SIZE_RE.match(s)
    if m is None:
        if SI_UNIT.match(s):
            raise InvalidInput(
                f"{what}: KB, MB, GB and TB are ambiguous (powers of 1000 or of 1024): write G or GiB "
                "(binary) or the number of bytes"
            )
        raise InvalidInput(f"{what} must be {SIZE_FORMS}")
    whole, frac, unit = m.group(1), m.group(2) or "", (m.group(3) or "").lower()
    scaled = int(whole + frac) << _SIZE_SHIFT[unit[:1]]
    size, rest = divmod(scaled, 10 ** len(frac))
    if rest:
        raise InvalidInput(f"{what} is not a whole number of bytes")
    return _size_in(size, what, lo, hi)


def _size_in(size: int, what: str, lo: int | None, hi: int | None) -> int:
    """A size out of [lo, hi] refused as every size is (``$.memory: expected a size <= 1 PiB``), unquoted."""
    if (bound := size_bound(size, lo, hi)) is not None:
        raise InvalidInput(f"{what}: {bound}")
    return size


def size_bound(size: int, lo: int | None, hi: int | None) -> str | None:
    """What a size out of [lo, hi] fails (``expected a size <= 1 PiB``), else None: the one wording of
    the command line's sizes and the documents' (:func:`vgpukit.declared.size_refused`)."""
    if lo is not None and size < lo:
        return f"expected a size >= {bytes_text(lo)}"
    if hi is not None and size > hi:
        return f"expected a size <= {bytes_text(hi)}"
    return None


# Kubernetes' quantity grammar (k8s.io/apimachinery resource.Quantity): sign, digits with an optional
# fraction, and a binary suffix (Ki..Ei), a decimal one (n u m k M G T P E) or an exponent (e3, E-2;
# two digits at most here: no quantity anyone means needs more, and 1e999999 would build a huge number)
_K8S_QUANTITY = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?\Z", re.ASCII
)
K8S_FORMS = "bytes or a Kubernetes quantity such as 4Gi, 1.5Gi or 4G (G = 10^9, Gi = 2^30)"


def k8s_quantity(value: object, what: str, forms: str = "a Kubernetes quantity") -> Fraction:
    """A number written in Kubernetes' quantity grammar (``4Gi``, ``1.5k``, ``500m``, ``2e3``), exactly,
    valued by the Kubernetes client library's parser (``kubernetes.utils.quantity.parse_quantity``, the
    k8s extra): the one reader of quantities where Kubernetes is the source. ``forms``: what the
    refusal says ``what`` must be."""
    if not isinstance(value, str) or not value.isascii() or len(value) > 64 or not _K8S_QUANTITY.match(value):
        raise InvalidInput(f"{what} must be {forms}")
    from fractions import Fraction

    from .extras import require

    try:
        return Fraction(require("kubernetes.utils.quantity").parse_quantity(value))
    except ValueError:
        raise InvalidInput(f"{what} must be {forms}") from None


def parse_k8s_quantity(value: object, what: str, *, lo: int | None = 0, hi: int | None = 1 << 50) -> int:
    """A byte count where Kubernetes is the source (a DRA claim's opaque configuration): an int, or a
    :func:`k8s_quantity` that comes to whole bytes. Unlike :func:`parse_size`, ``4G`` is 4*10^9 bytes
    here, as the API server reads it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return check_range(value, what, lo=lo, hi=hi)
    amount = k8s_quantity(value, what, K8S_FORMS)
    if amount.denominator != 1:
        raise InvalidInput(f"{what} is not a whole number of bytes")
    return check_range(int(amount), what, lo=lo, hi=hi)


def check_range(value: int, what: str, *, lo: int | None = None, hi: int | None = None) -> int:
    if lo is not None and value < lo:
        raise InvalidInput(f"{what} must be at least {lo}, not {_small(value)}", value=_small(value))
    if hi is not None and value > hi:
        raise InvalidInput(f"{what} must be at most {hi}, not {_small(value)}", value=_small(value))
    return value


def parse_float(text: object, what: str, *, lo: float | None = None, hi: float | None = None) -> float:
    """A finite decimal number written in ASCII, within [lo, hi]."""
    if isinstance(text, bool):
        raise InvalidInput(f"{what} must be a number, not a boolean")
    if isinstance(text, int | float) or (isinstance(text, str) and _FLOAT_RE.match(text) and len(text) <= 40):
        value = float(text)
    else:
        raise InvalidInput(f"{what} must be a number written in ASCII digits", value=_shown(text))
    if not math.isfinite(value):
        raise InvalidInput(f"{what} must be a finite number")
    if lo is not None and value < lo:
        raise InvalidInput(f"{what} must be at least {lo:g}, not {value:g}", value=value)
    if hi is not None and value > hi:
        raise InvalidInput(f"{what} must be at most {hi:g}, not {value:g}", value=value)
    return value


def has_control(text: str) -> bool:
    """Control, format, surrogate or unassigned code points (newlines, escapes, BOM, bidi...)."""
    if text.isascii():  # the common case, without a table lookup per character: only C0 and DEL
        return not text.isprintable()
    return any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") for ch in text)


def check_text(text: object, what: str, *, max_len: int = MAX_NAME, allow_empty: bool = False) -> str:
    """A single-line printable string (a name, a label, a type id)."""
    if not isinstance(text, str):
        raise InvalidInput(f"{what} must be a string")
    if not text and not allow_empty:
        raise InvalidInput(f"{what} must not be empty")
    if len(text) > max_len:
        raise InvalidInput(f"{what} is longer than {max_len} characters")
    if has_control(text):
        raise InvalidInput(f"{what} contains control characters", value=_shown(text))
    return text


def check_component(text: object, what: str) -> str:
    """A name that becomes one path component: also no ``/``, ``.``, ``..``."""
    name = check_text(text, what)
    if name in (".", "..") or "/" in name:
        raise InvalidInput(f"invalid {what}: {name!r}", value=name)
    return name


def check_depth(doc: Any, where: str, limit: int = MAX_DEPTH) -> Any:
    """Refuse documents nested deeper than ``limit`` (mappings and lists). Shared nodes are walked once."""
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if depth >= limit:
            raise InvalidInput(f"{where}: nested more than {limit} levels deep")
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend((c, depth + 1) for c in (node.values() if isinstance(node, dict) else node))
    return doc


def load_json(text: str | bytes, where: str, *, limit: int = MAX_DEPTH, max_bytes: int = MAX_DOC_BYTES) -> Any:
    """Parse JSON from a file or socket named ``where``; size, syntax and nesting checked."""
    import json

    if len(text) > max_bytes:
        raise InvalidInput(f"{where}: larger than {max_bytes} bytes")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise InvalidInput(f"{where}: nested more than {limit} levels deep") from None
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        raise InvalidInput(f"{where}: not valid JSON" + (f" (line {line})" if line else "")) from None
    return check_depth(doc, where, limit)


def load_yaml(
    text: str, where: str, *, limit: int = MAX_DEPTH, max_bytes: int = MAX_DOC_BYTES, unique: bool = False
) -> Any:
    """Parse one YAML document (safe loader); size, syntax and nesting checked before construction.

    One parse: the composer refuses to go deeper than ``limit`` as it goes (it recurses, and letting it
    reach Python's recursion limit on a 5000-level file takes seconds), and the checked node tree is
    then constructed. ``unique``: a key written twice in one mapping is refused (:func:`key_twice`).
    """
    doc, node = _load_yaml(text, where, limit, max_bytes)
    if unique and node is not None:
        _refuse_key_twice(node, where)
    return doc


def _refuse_key_twice(root: Any, where: str) -> None:
    if (found := key_twice(root)) is not None:
        raise InvalidInput(f"{placed(where, _mark(found[1].start_mark))}: {json_path(found[0])}: a key written twice")


def load_yaml_located(
    text: str, where: str, *, limit: int = MAX_DEPTH, max_bytes: int = MAX_DOC_BYTES, unique: bool = False
) -> tuple[Any, Positions]:
    """:func:`load_yaml`, and where each value of the document is (:class:`Positions`), from the same parse."""
    doc, node = _load_yaml(text, where, limit, max_bytes)
    if unique and node is not None:
        _refuse_key_twice(node, where)
    return doc, positions(node) if node is not None else Positions()


def _load_yaml(text: str, where: str, limit: int, max_bytes: int) -> tuple[Any, Any]:
    import yaml

    if len(text) > max_bytes:
        raise InvalidInput(f"{where}: larger than {max_bytes} bytes")
    _flow_depth(text, where, limit)

    class Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > limit + 1:  # a collection at depth limit (scalars below it are fine)
                    mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                    raise InvalidInput(f"{placed(where, _mark(mark))}: nested more than {limit} levels deep")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_yaml_timestamp(self, node: Any) -> Any:
            # a date is the text it is written as: no document of vgpukit's has a date type, and YAML's
            # would make 2026-02-28 a date but 2026-02-30 an error without a place (trials 7 and 8)
            return self.construct_scalar(node)

    Loader.add_constructor("tag:yaml.org,2002:timestamp", Loader.construct_yaml_timestamp)

    loader = None
    try:
        loader = Loader(text)  # the reader refuses control characters here already
        node = loader.get_single_node()
        if node is None:
            return None, None
        _node_depth(node, where, limit)  # aliases can nest the built document deeper than its text
        return loader.construct_document(node), node
    except RecursionError:
        raise InvalidInput(f"{where}: nested more than {limit} levels deep") from None
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{placed(where, _mark(getattr(exc, 'problem_mark', None)))}: not valid YAML") from None
    except (ValueError, OverflowError, TypeError):
        raise InvalidInput(f"{where}: a value cannot be read (out of range or of the wrong kind)") from None
    finally:
        if loader is not None:
            loader.dispose()


class Positions:
    """Where each value of a YAML document is: its path from the root (mapping keys, list indices)
    -> (line, column), both 1-based, of the value's first character (a key's own place under the path
    + ("<key>",)). Built from the composed node tree (:func:`positions`), so a check made on the plain
    document can say where the value it refuses is (:func:`at`, :meth:`locate`)."""

    def __init__(self, marks: dict[Path, tuple[int, int]] | None = None) -> None:
        self.marks = marks or {}

    def locate(self, path: Path) -> tuple[int, int] | None:
        """The place of the value at ``path``, else of its nearest ancestor there is one for."""
        for cut in range(len(path), -1, -1):
            found = self.marks.get(tuple(path[:cut]))
            if found is not None:
                return found
        return None

    def describe(self, where: str, path: Path) -> str:
        """``WHERE:LINE:COLUMN`` of :meth:`locate` (:func:`placed`; ``WHERE`` alone when unknown)."""
        return placed(where, self.locate(path))


def positions(node: Any) -> Positions:
    """The :class:`Positions` of a composed YAML node tree (keys read as plain scalars; a mapping key
    that is not a scalar is left out)."""
    import yaml

    marks: dict[Path, tuple[int, int]] = {}
    stack: list[tuple[Any, Path]] = [(node, ())]
    seen: set[int] = set()
    while stack:
        n, path = stack.pop()
        if n.start_mark is not None:
            marks.setdefault(path, (n.start_mark.line + 1, n.start_mark.column + 1))
        if id(n) in seen:  # an alias: its places are the anchor's
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode):
                    key = scalar_key(k)
                    marks.setdefault((*path, key, "<key>"), (k.start_mark.line + 1, k.start_mark.column + 1))
                    stack.append((v, (*path, key)))
        elif isinstance(n, yaml.SequenceNode):
            stack += [(v, (*path, i)) for i, v in enumerate(n.value)]
    return Positions(marks)


E = TypeVar("E", bound=VgpukitError)


def at(err: E, *path: Any) -> E:
    """``err``, noted as being about the value at ``path`` (relative to the document part the code that
    raised it was given: callers further up prefix their own part, :func:`under`)."""
    err.__dict__["at"] = (*path, *where_in(err))
    return err


def where_in(err: VgpukitError) -> Path:
    """The path :func:`at` noted on ``err`` (empty: none)."""
    found = err.__dict__.get("at", ())
    return tuple(found) if isinstance(found, tuple) else ()


T = TypeVar("T")


def under(path: Path, make: Callable[[], T]) -> T:
    """``make()``; an error it raises is noted as being under ``path``."""
    try:
        return make()
    except VgpukitError as err:
        at(err, *path)
        raise


_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|(?:^|(?<=\s))#[^\n]*', re.MULTILINE)
_BRACKET = re.compile(r"[\[\]{}]")


def _flow_depth(text: str, where: str, limit: int) -> None:
    """Refuse deep flow nesting (``[[[[...``) before the YAML scanner sees it: PyYAML's scanner is
    quadratic in the flow depth (5000 levels: seconds). Quoted strings and comments are skipped;
    brackets inside a block scalar may count (a refusal, never a wrong parse)."""
    if text.count("[") + text.count("{") <= limit:
        return
    depth = 0
    for m in _BRACKET.finditer(_QUOTED.sub(lambda q: " " * len(q.group()), text)):  # positions kept
        depth = depth + 1 if m.group() in "[{" else max(depth - 1, 0)
        if depth > limit + 1:  # as the composer counts: a collection at depth limit is fine
            line, column = text.count("\n", 0, m.start()) + 1, m.start() - text.rfind("\n", 0, m.start())
            raise InvalidInput(f"{placed(where, (line, column))}: nested more than {limit} levels deep")


def _node_depth(node: Any, where: str, limit: int) -> None:
    import yaml

    seen: set[int] = set()
    stack = [(node, 0)]
    while stack:
        n, depth = stack.pop()
        if isinstance(n, yaml.ScalarNode):
            continue
        if depth >= limit:
            raise InvalidInput(f"{placed(where, _mark(n.start_mark))}: nested more than {limit} levels deep")
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack += [(k, depth + 1), (v, depth + 1)]
        elif isinstance(n, yaml.SequenceNode):
            stack += [(v, depth + 1) for v in n.value]


def placed(where: str, place: tuple[int, int] | None) -> str:
    """``WHERE:LINE:COLUMN`` (1-based), the one way a place in a document is said (as compilers and
    yamllint say it, and editors jump to it); ``WHERE`` alone when the place is not known."""
    return f"{where}:{place[0]}:{place[1]}" if place else where


def _mark(mark: Any) -> tuple[int, int] | None:
    """(line, column), 1-based, of a PyYAML mark (None: none)."""
    return (mark.line + 1, mark.column + 1) if mark is not None else None


def _small(value: int) -> int | str:
    return value if abs(value) < 10**18 else ("a huge number" if value > 0 else "a hugely negative number")


def _shown(value: object) -> str:
    """How a refused value is named in a message: printable, short, never file content."""
    text = value if isinstance(value, str) else type(value).__name__
    text = "".join(ch if not has_control(ch) else "?" for ch in text)
    return text if len(text) <= 40 else text[:37] + "..."
