"""One idiom for value types: ``msgspec.Struct`` (docs/decisions.md, "Value types")."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import msgspec

from vgpukit.engine.step import Step

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "vgpukit"
# Rooms other changes of issue 31 rework (configuration documents; the node inventory): they follow the
# rule there. A file leaves this list when it holds no frozen dataclass.
PENDING = {
    "vgpukit/fleet/document.py",
    "vgpukit/k8s/dra/config.py",
    "vgpukit/qos/config.py",
    "vgpukit/node/inventory.py",
    "vgpukit/watch/model.py",
    "vgpukit/k8s/agent.py",
}


def _classes() -> list[tuple[str, ast.ClassDef]]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        out += [(rel, n) for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)]
    return out


def _frozen_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) and "frozen=True" in ast.unparse(d) for d in node.decorator_list)


def test_a_frozen_dataclass_is_a_step() -> None:
    """A value is a frozen Struct; a frozen dataclass is left only to the engine's steps, which the
    engine journals through ``dataclasses`` (docs/engine.md)."""
    offenders = []
    for rel, node in _classes():
        if not _frozen_dataclass(node) or rel in PENDING or rel.startswith("vgpukit/engine/"):
            continue
        module = importlib.import_module(rel.removesuffix(".py").replace("/", "."))
        cls = getattr(module, node.name)
        if not (isinstance(cls, type) and issubclass(cls, Step)):
            offenders.append(f"{rel}:{node.lineno}: {node.name}")
    assert not offenders, "frozen dataclasses that are values, not steps (make them msgspec.Struct):\n" + "\n".join(
        offenders
    )
    assert not (PKG / "records.py").exists()


def _returns_fields_only(fn: ast.FunctionDef) -> bool:
    """The body is ``return msgspec...(self)`` (or ``d: T = msgspec...(self); return d``): the encoding,
    under the name its callers use."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) == 2 and isinstance(body[0], ast.AnnAssign) and isinstance(body[1], ast.Return):  # d: T = ...
        body = [ast.Return(body[0].value)] if ast.unparse(body[1]) == f"return {ast.unparse(body[0].target)}" else body
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and ast.unparse(body[0].value or ast.Constant(None)).startswith("msgspec.")
    )


def test_a_hand_written_document_says_why() -> None:
    """A Struct's hand-written ``to_dict``/``as_dict`` reshapes its fields (renames, derived keys, parts
    left out), and its ``def`` line says how; the plain form is ``msgspec.to_builtins``."""
    offenders = []
    for rel, node in _classes():
        if not any("Struct" in ast.unparse(b) for b in node.bases):
            continue
        lines = (ROOT / rel).read_text().splitlines()
        for fn in node.body:
            if not isinstance(fn, ast.FunctionDef) or fn.name not in ("to_dict", "as_dict"):
                continue
            said = "\n".join(lines[fn.lineno - 1 : fn.body[0].lineno])  # the def and its first line
            if not _returns_fields_only(fn) and "# a reshape:" not in said:
                offenders.append(f"{rel}:{fn.lineno}: {node.name}.{fn.name}")
    assert not offenders, "to_dict/as_dict without '# a reshape: ...' (or use msgspec.to_builtins):\n" + "\n".join(
        offenders
    )


def test_struct_json_keeps_the_field_order_and_nests() -> None:
    """What the documents rely on: ``to_builtins`` keeps the declared order, nests Structs as dicts,
    tuples as lists; ``omit_defaults`` leaves a default out (``HealthEvent.gi`` when -1)."""
    from vgpukit.health.model import HealthEvent
    from vgpukit.pci import Link, PciDevice

    dev = PciDevice(
        "0000:03:00.0",
        "10de",
        "20b0",
        0x030200,
        "gpu",
        "A100",
        None,
        0,
        7,
        Link("16.0 GT/s PCIe", 16),
        None,
        ("0000:00:01.0",),
        "pci0000:00",
    )
    d = msgspec.to_builtins(dev)
    assert list(d)[:4] == ["bdf", "vendor", "device", "class_code"] and list(d)[-1] == "extra"
    assert d["link"] == {"speed": "16.0 GT/s PCIe", "width": 16, "max_speed": None, "max_width": None}
    assert d["parents"] == ("0000:00:01.0",)  # a tuple stays one: json writes it as an array
    ev = HealthEvent(1.0, "gpu0", "0000:03:00.0", "xid", 79, "unusable", "reboot", "fell off the bus")
    assert "gi" not in msgspec.to_builtins(ev) and msgspec.to_builtins(msgspec.structs.replace(ev, gi=2))["gi"] == 2
