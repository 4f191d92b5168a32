"""Keys in a composed YAML tree: a scalar key as the safe loader builds it, the first key written twice
in one mapping (PyYAML keeps the last one silently), and a document path as the declarations' errors
say it (``$.gpus.gpu0``). Used by :mod:`vgpukit.inputs` (every configuration file) and the host
config's reader."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Path = tuple[Any, ...]  # keys and list indices from a document's root to a value

SAFE_KEY = re.compile(r"[A-Za-z0-9_.+-]{1,64}\Z", re.ASCII)  # a key shown in a path only when plain


def key_twice(root: Any, descend: Callable[[Path, Any], bool] | None = None) -> tuple[Path, Any] | None:
    """The first key written twice in one mapping of a composed YAML tree (PyYAML keeps the last one
    silently): the mapping's path (a key that is not plain shown as ``?``) and the second key's node.
    ``descend(path, key)``: whether to look inside that key's value (all of them by default)."""
    import yaml

    stack: list[tuple[Any, Path]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for k, v in node.value:
                key = scalar_key(k) if isinstance(k, yaml.ScalarNode) else None
                if key in seen and isinstance(key, str | int):
                    return path, k
                seen.add(key)
                if descend is None or descend(path, key):
                    stack.append((v, (*path, key if SAFE_KEY.match(str(key)) else "?")))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, (*path, i)) for i, v in enumerate(node.value))
    return None


def scalar_key(node: Any) -> Any:
    """A scalar key as the safe loader builds it (``1`` an int, ``gpu0`` a str, ``?`` None): an empty
    scalar serialized alone is no document PyYAML reads back, so it is constructed, not reparsed."""
    import yaml

    if node.tag == "tag:yaml.org,2002:timestamp":  # as the document's loader builds a date: its text
        return node.value
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return node.value
    finally:
        loader.dispose()


def json_path(path: Path) -> str:
    """``$.gpus.gpu0.tenants[1]``: a document path as the declarations' errors say it."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
