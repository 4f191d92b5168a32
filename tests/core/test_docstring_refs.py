"""Docstrings name what is there: every reference in a docstring of vgpukit -- a role
(:class:`X`, :meth:`X.y`, :func:`.x`, :mod:`vgpukit.x`), a dotted ``vgpukit.x.Y`` and a ``name.attr`` in
double backquotes whose first name the module knows -- resolves against the code as it is (issue 31:
``host_layout.Layout`` cited after it was gone). Resolved by importing the modules, so a re-export or an
inherited method counts; a name of another vgpukit module (:class:`Env`) or a sibling module
(``callouts.live_modify``) counts too; ``env.seen`` (a variable's attribute) is not a name and is skipped."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "vgpukit"
GENERATED = ("_pb2", "v1beta1", "dra_v1", "drahealth_v1", "pluginreg_v1")
ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj):`~?([\w.]+)`")
TICKED = re.compile(r"``([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)``")
DOTTED = re.compile(r"(?<![\w.:/-])(vgpukit(?:\.\w+)+)(?!\.?[\w/=-])")  # not vgpukit.error/v1, vgpukit.io/x


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def absolute(mod: str, level: int, target: str | None) -> str:
    pkg = mod if (PKG / Path(*mod.split(".")[1:]) / "__init__.py").exists() else mod.rpartition(".")[0]
    base = pkg.split(".")[: len(pkg.split(".")) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imported_names(tree: ast.Module, mod: str) -> dict[str, str]:
    """name -> what it names, for every import of the module (under TYPE_CHECKING and in functions too)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = absolute(mod, node.level, node.module) if node.level else node.module or ""
            out.update({a.asname or a.name: f"{base}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            out.update(
                {a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0] for a in node.names}
            )
    return out


def attrs(obj: object, rest: list[str]) -> bool:
    for name in rest:
        if not hasattr(obj, name):  # an instance attribute the class declares, or nothing
            return isinstance(obj, type) and any(name in getattr(c, "__annotations__", {}) for c in obj.__mro__)
        obj = getattr(obj, name)
    return True


def lookup(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute of one (the longest importable prefix)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        return attrs(found, parts[i:])
    return False


class Module:
    def __init__(self, path: Path, index: dict[str, list[str]]) -> None:
        self.path, self.name, self.index = path, module_name(path), index
        self.tree = ast.parse(path.read_text())
        self.module = importlib.import_module(self.name)
        self.names = imported_names(self.tree, self.name)

    def resolves(self, ref: str, owner: object, role: bool) -> bool:
        if ref.startswith("."):
            level = len(ref) - len(ref.lstrip("."))
            return lookup(absolute(self.name, level, ref.lstrip(".")))
        parts = ref.split(".")
        if parts[0] == "vgpukit":
            return lookup(ref)
        if owner is not None and hasattr(owner, parts[0]):
            return attrs(owner, parts)
        if hasattr(self.module, parts[0]):
            return attrs(self.module, parts)
        if parts[0] in self.names:
            return lookup(".".join([self.names[parts[0]], *parts[1:]]))
        if not role:
            return True  # ``env.seen``: a variable's attribute, not a name to resolve
        if lookup(absolute(self.name, 1, ref)):  # a sibling module
            return True
        if any(lookup(f"{m}.{ref}") for m in self.index.get(parts[0], ())):  # another module's name
            return True
        return lookup(ref)  # a standard or third-party module (os.fspath, click.Context)

    def broken(self) -> list[str]:
        bad: list[str] = []

        def visit(node: ast.AST, owner: object, assigned: set[str]) -> None:
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                if isinstance(node, ast.ClassDef):
                    owner = getattr(self.module, node.name, None) if owner is None else owner
                    assigned = {
                        n.attr
                        for n in ast.walk(node)
                        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
                    }
                for ref, role in sorted(references(ast.get_docstring(node, clean=False) or "")):
                    if ref.split(".")[0] not in assigned and not self.resolves(ref.rstrip("."), owner, role):
                        bad.append(f"{self.path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}: {ref}")
            for child in ast.iter_child_nodes(node):
                visit(child, owner, assigned)

        visit(self.tree, None, set())
        return bad


def references(doc: str) -> set[tuple[str, bool]]:
    """(reference, whether it must name something) in one docstring."""
    out = {(r, True) for r in ROLE.findall(doc)}
    out |= {(r, True) for r in DOTTED.findall(doc) if not r.endswith(".io") and ".io." not in r}
    return out | {(r, False) for r in TICKED.findall(doc)}


def sources() -> list[Path]:
    return [
        p
        for p in sorted(PKG.rglob("*.py"))
        if p.name != "__main__.py" and not any(g in module_name(p) for g in GENERATED)
    ]


def top_level_names(paths: list[Path]) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for p in paths:
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                index.setdefault(node.name, []).append(module_name(p))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Name):
                        index.setdefault(t.id, []).append(module_name(p))
    return index


def test_docstrings_cite_what_exists() -> None:
    paths = sources()
    index = top_level_names(paths)
    bad = [line for p in paths for line in Module(p, index).broken()]
    assert not bad, "docstrings citing names that do not exist:\n" + "\n".join(bad)


def test_the_reference_check_can_fail() -> None:
    """The references issue 31 found, and the ways of naming that must resolve."""
    index = top_level_names(sources())
    here = Module(PKG / "k8s" / "dra" / "claims.py", index)
    assert not here.resolves("vgpukit.host_layout.Layout.dra_claim_record", None, True)
    assert not here.resolves("planner.modify", None, True) and not here.resolves("Layout", None, True)
    assert here.resolves("vgpukit.host.Host.dra_claim_record", None, True)  # inherited from a room
    assert here.resolves(".ondemand.prepare", None, True) and here.resolves("ClaimRecord.render", None, True)
    assert here.resolves("Env", None, True) and here.resolves("os.fspath", None, True)
    assert ("vgpukit.io", True) not in references("the CDI kind vgpukit.io/claim, ``vgpukit.error/v1``")
