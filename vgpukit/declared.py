"""Configuration documents declared once: a ``msgspec.Struct`` per document both checks it and is its JSON Schema.

A document's declaration (its fields, their types and bounds: ``Annotated[int, Meta(ge=1, le=100)]``)
is the one statement of its shape. :func:`convert` checks a parsed document (JSON, or YAML read by
PyYAML) against it and returns the typed value, or raises one :class:`~vgpukit.errors.InvalidInput`
line with the path of the value at fault (``$.share: expected int >= 1``), noted with :func:`at` so a
YAML reader can add the line (:class:`vgpukit.inputs.Positions`). :func:`schema` emits the JSON Schema
that ships under ``vgpukit/data/schemas/`` (``scripts/gen_schemas.py`` writes them; a test checks the
shipped files equal the generated ones). What a schema cannot say (one field against another, a GPU
named twice, a share over a capacity) is the area's planner's (docs/decisions.md, "Configuration
documents").

Refusals never quote the document: a value is named by its type only, an unknown key by the keys
allowed there (its line and column are the key's), a refused enum by the values allowed.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi

from .errors import InvalidInput
from .inputs import SI_UNIT, at, parse_k8s_quantity, parse_size, size_bound

T = TypeVar("T")
_MSG = re.compile(r"(?P<what>.*?)(?: - at `(?P<path>[^`]*)`(?: in `(?P<outer>[^`]*)`)?)?\Z", re.DOTALL)
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,40}\Z", re.ASCII)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_FIELD = "field refused: "  # how a declaration's own check (__post_init__) names its field to _explain
_REFUSED = re.compile(re.escape(_FIELD) + r"(?P<field>[A-Za-z0-9_]+): (?P<text>.*)\Z", re.DOTALL)


def convert(doc: Any, typ: type[T] | Any, where: str = "") -> T:
    """``doc`` as the declared ``typ`` (strictly: no string for a number, no unknown key); a refusal is
    one line ``WHERE: $.PATH: expected ...``, noted (:func:`vgpukit.inputs.at`) with the path."""
    try:
        return msgspec.convert(doc, typ, strict=True)
    except msgspec.ValidationError as err:
        path, text, key = _explain(doc, typ, str(err))
        shown = "$" + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" if _NAME.match(str(p)) else "[?]" for p in path
        )
        msg = f"{shown}: {text}"
        raise at(InvalidInput(f"{where}: {msg}" if where else msg), *path, *key) from None


def text_sizes(doc: msgspec.Struct, form: str, *fields: str, lo: int, hi: int, k8s: bool = False) -> None:
    """A declaration's ``__post_init__`` check of its sizes written as text (``memory: 4G``), which no
    schema can bound: each of ``fields`` that is text must come to ``lo``..``hi`` bytes, else the
    refusal is :func:`convert`'s, at the field (``$.gpus.gpu0.tenants.web.memory: expected a size <=
    1 PiB``). ``form``: what the declaration says the text may be (its ``Meta`` description)."""
    names = dict(zip(doc.__struct_fields__, doc.__struct_encode_fields__, strict=True))
    for name in fields:
        value = getattr(doc, name)
        if isinstance(value, str) and (problem := size_refused(value, form, lo=lo, hi=hi, k8s=k8s)):
            raise ValueError(f"{_FIELD}{names[name]}: {problem}")  # msgspec adds the struct's path


def size_refused(text: str, form: str, *, lo: int, hi: int, k8s: bool = False) -> str | None:
    """What a size written as text in a configuration document fails, said as what was expected after the
    value's path (:func:`text_sizes`), never quoting the text; None when it reads as ``lo``
    to ``hi`` bytes. ``form``: the declaration's description of the sizes it takes; ``k8s``: Kubernetes'
    grammar (:func:`~vgpukit.inputs.parse_k8s_quantity`), else vgpukit's own (:func:`~vgpukit.inputs.parse_size`)."""
    try:
        read = parse_k8s_quantity if k8s else parse_size
        value = read(text, "size", lo=None, hi=None)
    except InvalidInput as err:
        if err.message.endswith("not a whole number of bytes"):
            return "expected a whole number of bytes"
        if not k8s and SI_UNIT.match(text.strip()):
            return (
                "expected a binary unit such as G or GiB (KB, MB, GB and TB are ambiguous: powers of 1000 or of 1024)"
            )
        return f"expected {form}"
    return size_bound(value, lo, hi)


def schema(typ: Any, *, refer: dict[str, str] | None = None, **head: Any) -> dict[str, Any]:
    """The JSON Schema (2020-12) of ``typ``, its definitions under ``$defs`` (a top-level struct inlined);
    ``head`` (``$id``, ``title``, ``description``) comes first and wins over the struct's own. ``refer``:
    definitions that are another shipped schema (struct name -> its reference, ``qos/config.json``), referred
    to instead of copied (the definitions only they use left out)."""
    (body,), defs = msgspec.json.schema_components([typ], ref_template="#/$defs/{name}")
    if refer:
        body, defs = _referred(body, defs, refer)
    for d in defs.values():  # a docstring's line breaks and indentation are not the description's
        if "description" in d:
            d["description"] = " ".join(d["description"].split())
    ref = body.get("$ref", "")
    name = ref.rpartition("/")[2]
    if set(body) == {"$ref"} and f'"{ref}"' not in json.dumps({k: v for k, v in defs.items() if k != name}):
        body = {k: v for k, v in defs.pop(name).items() if k != "title"}
    out = {"$schema": "https://json-schema.org/draft/2020-12/schema", **head}
    out.update((k, v) for k, v in body.items() if k not in head)
    return {**out, "$defs": defs} if defs else out


def _referred(
    body: dict[str, Any], defs: dict[str, Any], refer: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``body`` and ``defs`` with each definition named in ``refer`` replaced by its reference, and the
    definitions no longer reachable from ``body`` dropped."""
    text = json.dumps([body, {k: v for k, v in defs.items() if k not in refer}])
    for name, ref in refer.items():
        text = text.replace(json.dumps(f"#/$defs/{name}"), json.dumps(ref))
    body, left = json.loads(text)
    used: set[str] = set()
    todo = [json.dumps(body)]
    while todo:
        for name in re.findall(r'"#/\$defs/([^"]+)"', todo.pop()):
            if name not in used and name in left:
                used.add(name)
                todo.append(json.dumps(left[name]))
    return body, {k: v for k, v in left.items() if k in used}


def _explain(doc: Any, typ: Any, raw: str) -> tuple[tuple[Any, ...], str, tuple[Any, ...]]:
    """(path, message, key) of msgspec's refusal: the path with the keys msgspec leaves out (``[...]``)
    found again, the message without any of the document's content, and (an unknown key refused) the
    key's own place under the path (``(KEY, "<key>")``, for :class:`~vgpukit.inputs.Positions`)."""
    m = _MSG.match(raw)
    what, where = (m["what"], m["outer"] or m["path"] or "$") if m else (raw, "$")
    key_error = bool(m and m["outer"])
    path: list[Any] = []
    node, info = doc, mi.type_info(typ)
    for name, index in _STEP.findall(where[1:]):
        info = _resolve(info, node)
        if index == "...":  # a mapping's value: which one is refused is found by converting each
            bad = _failing_key(node, info)
            if bad is None:
                break
            path.append(bad)
            node, info = node[bad], info.value_type
        elif index:
            path.append(int(index))
            node, info = node[int(index)], getattr(info, "item_type", info)
        else:
            path.append(name)
            node, info = (node.get(name) if isinstance(node, dict) else None), _field(info, name)
    if key_error:  # a mapping's key: the form a key must take, as the declaration describes it
        keys = getattr(_resolve(info, node), "key_type", None)
        form = _described(keys) if keys is not None else None
        if "regex" not in what:
            return tuple(path), "a key is not a name (text)", ()
        return tuple(path), "a key is not a name of the allowed form" + (f" ({form})" if form else ""), ()
    refused = _REFUSED.match(what)
    if refused:  # a declaration's own check (text_sizes): its words, at its field
        return (*path, refused["field"]), refused["text"], ()
    key: tuple[Any, ...] = ()
    if what.startswith("Object contains unknown field") and isinstance(node, dict):
        key = next(((k, "<key>") for k in node if what == f"Object contains unknown field `{k}`"), ())
    return tuple(path), _message(what, _resolve(info, node), _described(info)), key


def _resolve(info: Any, node: Any) -> Any:
    """The type ``info`` stands for at ``node``: metadata unwrapped, a tagged union's member chosen."""
    while isinstance(info, mi.Metadata):
        info = info.type
    if isinstance(info, mi.UnionType):
        for t in info.types:
            t = t.type if isinstance(t, mi.Metadata) else t
            if isinstance(t, mi.StructType) and t.tag_field and isinstance(node, dict):
                if node.get(t.tag_field) == t.tag:
                    return t
            elif isinstance(t, mi.DictType | mi.StructType) and isinstance(node, dict):
                return t
    return info


def _field(info: Any, name: str) -> Any:
    if isinstance(info, mi.StructType):
        if name == info.tag_field:
            return mi.LiteralType((info.tag,))
        return next((f.type for f in info.fields if f.encode_name == name), None)
    if isinstance(info, mi.UnionType):  # a tagged union whose tag is refused: the tags allowed
        tags = tuple(t.tag for t in info.types if isinstance(t, mi.StructType) and t.tag_field == name)
        return mi.LiteralType(tags) if tags else None
    return None


def _failing_key(node: Any, info: Any) -> Any:
    if not isinstance(node, dict) or not isinstance(info, mi.DictType):
        return None
    for key, value in node.items():
        try:
            msgspec.convert(value, _python(info.value_type), strict=True)
        except (msgspec.ValidationError, TypeError):
            return key
    return None


def _python(info: Any) -> Any:
    """The Python type a type-info node was made from (structs and containers the walk reaches)."""
    if isinstance(info, mi.StructType):
        return info.cls
    if isinstance(info, mi.Metadata):
        return _python(info.type)
    if isinstance(info, mi.DictType):
        return dict[_python(info.key_type), _python(info.value_type)]  # type: ignore[misc]
    if isinstance(info, mi.ListType):
        return list[_python(info.item_type)]  # type: ignore[misc]
    if isinstance(info, mi.UnionType):
        return _union(*(_python(t) for t in info.types))
    if isinstance(info, mi.LiteralType):
        from typing import Literal

        return Literal[info.values]
    simple: dict[type, Any] = {
        mi.IntType: int,
        mi.FloatType: float,
        mi.StrType: str,
        mi.BoolType: bool,
        mi.NoneType: type(None),
    }
    return simple.get(type(info), Any)


def _union(*types: Any) -> Any:
    out = types[0]
    for t in types[1:]:
        out = out | t
    return out


def _described(info: Any) -> str | None:
    """The description the declaration gives the value's form (a ``Meta(description=...)``), if any."""
    if isinstance(info, mi.Metadata):
        return (info.extra_json_schema or {}).get("description") or _described(info.type)
    if isinstance(info, mi.UnionType):
        return next((d for t in info.types if (d := _described(t))), None)
    return None


def _message(what: str, info: Any, described: str | None = None) -> str:
    """msgspec's message, said in the house style, with the document's content left out."""
    if what.startswith(("Invalid enum value", "Invalid value")):
        allowed = info.values if isinstance(info, mi.LiteralType) else ()
        if len(allowed) == 1:
            return f"expected {allowed[0]}"
        return "expected one of " + ", ".join(map(str, allowed)) if allowed else "not an allowed value"
    if what.startswith("Object contains unknown field"):  # its place is the key's; the name is content
        known = [f.encode_name for f in info.fields] if isinstance(info, mi.StructType) else []
        if isinstance(info, mi.StructType) and info.tag_field:  # a tagged union's tag (``kind``) is allowed too
            known.insert(0, info.tag_field)
        return f"unknown field (allowed: {', '.join(known)})" if known else "unknown field"
    if "matching regex" in what:  # the form as the declaration describes it, not the regex
        return f"expected {described}" if described else "expected str in the form the schema describes"
    return (what[:1].lower() + what[1:]).replace("`", "").replace("Object", "object")
