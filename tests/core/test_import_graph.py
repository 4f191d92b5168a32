"""The layering rules, checked on the import graph built from the source (module-level and lazy imports).

* Nothing below the front ends imports a front end (vgpukit.cli or a command module).
* No import cycles among vgpukit modules, lazy imports counted: a lazy import only hides a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "vgpukit"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_front_end(mod: str) -> bool:
    """The front ends: the top-level commands (``vgpukit/cli/``), the click toolkit they share
    (``vgpukit/clikit/``), each area's commands (``<area>/cli.py``, ``<area>/cli_<topic>.py``), ``__main__``."""
    parts = mod.split(".")
    last = parts[-1]
    return (
        parts[:2] in (["vgpukit", "cli"], ["vgpukit", "clikit"])
        or last == "cli"
        or last.startswith("cli_")
        or last == "__main__"
    )


def test_one_naming_convention_for_command_modules() -> None:
    """Command modules are ``cli.py`` / ``cli_<topic>.py`` in an area, ``cmd_<name>.py`` in vgpukit/cli/."""
    odd = sorted(str(p.relative_to(ROOT)) for p in PKG.rglob("*.py") if p.stem.endswith(("_cli", "_cmd")))
    odd += sorted(
        str(p.relative_to(ROOT))
        for p in (PKG / "cli").glob("*.py")
        if not p.stem.startswith("cmd_") and p.stem not in ("__init__", "main", "manpage", "entry")
    )
    assert not odd, "command modules named outside the convention (CONTRIBUTING.md):\n" + "\n".join(odd)


def _resolve(mod: str, is_pkg: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph() -> dict[str, set[str]]:
    """module -> the vgpukit modules it imports anywhere in its body (functions and TYPE_CHECKING blocks too)."""
    paths = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for mod, path in paths.items():
        tree = ast.parse(path.read_text(), str(path))
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, path.name == "__init__.py", node.level, node.module)
                # "from pkg import sub" imports the submodule pkg.sub when there is one
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in paths:  # "vgpukit.x.y" where y is an attribute
                    name = name.rpartition(".")[0]
                if name.startswith("vgpukit") and name != mod:
                    deps.add(name)
        graph[mod] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_graph_sees_lazy_imports() -> None:
    graph = import_graph()
    assert "vgpukit.host" in graph["vgpukit.clikit.context"]  # module level
    assert "vgpukit.sim.kernel" in graph["vgpukit.wiring"]  # in a function
    assert "vgpukit.nvml" in graph["vgpukit.clikit.context"]  # under TYPE_CHECKING
    assert "vgpukit.nvml.table" in graph["vgpukit.sim.nvml"]  # "from ..nvml import table" names the submodule


def front_end_imports(graph: dict[str, set[str]]) -> set[str]:
    return {
        f"{mod} -> {dep}" for mod, deps in graph.items() if not is_front_end(mod) for dep in deps if is_front_end(dep)
    }


def test_nothing_below_the_front_ends_imports_them() -> None:
    bad = sorted(front_end_imports(import_graph()))
    assert not bad, "domain modules importing front ends (take a Host / facade / options instead):\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles (module-level and lazy imports):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_checks_can_fail() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]
    assert is_front_end("vgpukit.mig.cli") and is_front_end("vgpukit.mig.cli_config")
    assert is_front_end("vgpukit.clikit.output") and is_front_end("vgpukit.cli.cmd_topo")
    assert not is_front_end("vgpukit.mig.view") and not is_front_end("vgpukit.client")


# ----------------------------------------------------------------------------- planners and front ends
FRONT_END_PACKAGES = ("vgpukit.fleet", "vgpukit.k8s")  # apply (and what runs it) and the Kubernetes agents


def is_door(mod: str) -> bool:
    """A front end in the wide sense: a command module, or the apply / Kubernetes packages."""
    return is_front_end(mod) or mod.startswith(tuple(p + "." for p in FRONT_END_PACKAGES)) or mod in FRONT_END_PACKAGES


def door_of(mod: str) -> str:
    """Which front end ``mod`` belongs to: the CLI core, fleet and k8s are one each, a command module is its own."""
    for pkg in ("vgpukit.cli", *FRONT_END_PACKAGES):
        if mod == pkg or mod.startswith(pkg + "."):
            return pkg
    return mod


def planners(graph: dict[str, set[str]]) -> list[str]:
    return sorted(m for m in graph if m.startswith("vgpukit.") and m.endswith(".planner"))


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_planners_import_no_front_end() -> None:
    """A planner is below every door (vgpukit/*/planner.py): nothing it imports, directly or not, is a
    command module, apply's fleet package or the Kubernetes package."""
    graph = import_graph()
    found = planners(graph)
    want = {"vgpukit.sriov.planner", "vgpukit.mig.planner", "vgpukit.mdev.planner", "vgpukit.vgpu.planner"}
    want |= {"vgpukit.qos.planner", "vgpukit.cdi.planner", "vgpukit.attach.planner"}
    assert want <= set(found)
    below = {"vgpukit.qos.daemon", "vgpukit.attach.ops"}  # they run planners' plans: no planner reaches them
    bad = sorted(f"{p} -> {d}" for p in found for d in reachable(graph, p) if is_door(d) or d in below)
    assert not bad, "planners reaching front ends:\n" + "\n".join(bad)


def private_imports() -> set[str]:
    """``from <front end> import _name`` in another front end."""
    paths = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}
    out: set[str] = set()
    for mod, path in paths.items():
        if not is_door(mod):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _resolve(mod, path.name == "__init__.py", node.level, node.module)
            for alias in node.names:
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and is_door(target) and door_of(target) != door_of(mod):
                    out.add(f"{mod} imports {alias.name} from {target}")
    return out


def test_no_front_end_imports_another_front_ends_private_names() -> None:
    bad = sorted(private_imports())
    assert not bad, "front ends sharing private names (move the rule into the area's planner):\n" + "\n".join(bad)


def test_the_door_checks_can_fail() -> None:
    assert is_door("vgpukit.fleet.plan") and is_door("vgpukit.k8s.agent") and is_door("vgpukit.sriov.cli")
    assert not is_door("vgpukit.sriov.planner") and door_of("vgpukit.fleet.plan") == door_of("vgpukit.fleet.cli")
    g = {"vgpukit.x.planner": {"vgpukit.x.model"}, "vgpukit.x.model": {"vgpukit.fleet.plan"}}
    assert reachable(g, "vgpukit.x.planner") == {"vgpukit.x.model", "vgpukit.fleet.plan"}


def command_wide_notes() -> set[str]:
    """Code that keeps what steps read in a command-wide dict (``env.seen``, gone): any use of a
    ``seen`` attribute of an ``env`` or an ``Env`` (what steps observed is the run's outcome)."""
    out: set[str] = set()
    for path in sorted(PKG.rglob("*.py")):
        mod = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "seen":
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name == "env":
                    out.add(f"{mod}:{node.lineno} uses env.seen")
    return out


def test_what_steps_observed_is_the_runs_outcome_not_a_command_wide_dict() -> None:
    """Steps hand what they read before and after to the executor (``Observing``), which returns it in
    the run's ``Outcome``; a report renders from that. Nothing rides on ``Env`` from step to step."""
    from dataclasses import fields

    from vgpukit.engine import Env

    assert "seen" not in {f.name for f in fields(Env)}
    bad = sorted(command_wide_notes())
    assert not bad, "state carried from step to step through env.seen:\n" + "\n".join(bad)


def test_the_click_toolkit_names_no_area_and_no_simulator() -> None:
    """vgpukit/clikit is below every command: what a command is wired to (the simulated or real
    kernel and NVML, the CDI specs kept current) comes from vgpukit.wiring, given by whoever starts it."""
    graph = import_graph()
    low = ("vgpukit.clikit", "vgpukit.errors", "vgpukit.host", "vgpukit.inputs", "vgpukit.engine", "vgpukit.nvml")
    low += ("vgpukit.naming", "vgpukit.pci", "vgpukit.words", "vgpukit.data")
    low += ("vgpukit.extras", "vgpukit.processes", "vgpukit.holders", "vgpukit.iommu")
    low += ("vgpukit.watch",)  # the watch: listening, next to the host door (no area)
    low += ("vgpukit.partial",)  # what a whole-host read could not read (no area)
    bad = sorted(
        f"{m} -> {d}"
        for m, deps in graph.items()
        if m.startswith("vgpukit.clikit")
        for d in deps
        if not any(d == p or d.startswith(p + ".") for p in low)
    )
    assert not bad, "the click toolkit importing an area, the simulator or a front end:\n" + "\n".join(bad)


# ----------------------------------------------------------------------------- the host door's rooms
HOST_FACES = ("vgpukit.host", "vgpukit.host.notify")  # the door and what it takes and returns; its listening side
# Each room of the door (docs/engine.md, "The host door") and the rooms it may stand on.
HOST_ROOMS = {
    "vgpukit.host.contain": set(),
    "vgpukit.host.fileio": set(),
    "vgpukit.host.programs": set(),
    "vgpukit.host.kernel_paths": {"vgpukit.host.contain"},
    "vgpukit.host.file_places": {"vgpukit.host.contain"},
    "vgpukit.host.changes": {"vgpukit.host.contain", "vgpukit.host.fileio"},
    "vgpukit.host.door": {"vgpukit.host." + r for r in ("contain", "fileio", "programs", "kernel_paths", "file_places")}
    | {"vgpukit.host.changes"},
    "vgpukit.host.notify": {"vgpukit.host.door"},
}


def host_room_breaches(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a room of the host door from outside it (only its faces are public), and imports between
    its rooms that :data:`HOST_ROOMS` does not list (a room reaching up or sideways)."""
    bad = []
    for mod, deps in graph.items():
        inside = mod == "vgpukit.host" or mod.startswith("vgpukit.host.")
        for dep in sorted(deps):
            if not dep.startswith("vgpukit.host.") or mod == "vgpukit.host":
                continue
            if not inside and dep not in HOST_FACES:
                bad.append(f"{mod} -> {dep} (import it from vgpukit.host)")
            elif inside and dep not in HOST_ROOMS.get(mod, set()):
                bad.append(f"{mod} -> {dep} (not a room it stands on)")
    return bad


def test_the_host_door_is_entered_by_its_face_and_its_rooms_stand_in_order() -> None:
    graph = import_graph()
    assert set(HOST_ROOMS) == {m for m in graph if m.startswith("vgpukit.host.")}, "a room of the door unlisted here"
    bad = host_room_breaches(graph)
    assert not bad, "the host door's rooms entered from outside or out of order:\n" + "\n".join(bad)


def test_the_host_room_check_can_fail() -> None:
    g = {
        "vgpukit.mdev.callouts": {"vgpukit.host.programs"},
        "vgpukit.pci": {"vgpukit.host"},
        "vgpukit.host.contain": {"vgpukit.host.door"},
    }
    assert host_room_breaches(g) == [
        "vgpukit.mdev.callouts -> vgpukit.host.programs (import it from vgpukit.host)",
        "vgpukit.host.contain -> vgpukit.host.door (not a room it stands on)",
    ]


def package_of(mod: str) -> str:
    """``vgpukit.<package>`` for a module in a package; a top-level module is its own."""
    return ".".join(mod.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        out.setdefault(package_of(mod), set()).update(package_of(d) for d in deps if package_of(d) != package_of(mod))
    return out


def test_no_package_loops() -> None:
    """Packages (folders) import each other in no loop either: a loop through two packages' modules
    (the click toolkit and the simulator whose commands use it; CDI and QoS) is an arrow running back up
    a layer in the structure picture, even when no two modules import each other."""
    found = cycles(package_graph(import_graph()))
    assert not found, "package loops (move the shared fact below both):\n" + "\n".join(" <-> ".join(c) for c in found)


# ----------------------------------------------------------------------------- the node's device view
def below_kubernetes(graph: dict[str, set[str]]) -> list[str]:
    """Modules outside the Kubernetes package (``vgpukit.k8s``) that reach it, the top-level commands
    (``vgpukit.cli``, which compose every front end) aside: the node's device view (``vgpukit.node``) is
    below every front end, so the exporter (``vgpukit.metrics``) and remediation read it without Kubernetes."""
    return sorted(
        f"{m} -> {d}"
        for m in graph
        if not m.startswith(("vgpukit.k8s.", "vgpukit.cli."))
        for d in reachable(graph, m)
        if d.startswith("vgpukit.k8s.")
    )


def test_the_node_view_and_its_readers_stand_below_kubernetes() -> None:
    graph = import_graph()
    assert {"vgpukit.node.inventory", "vgpukit.node.claimed", "vgpukit.node.views"} <= set(graph)
    bad = below_kubernetes(graph)
    assert not bad, "modules reaching the Kubernetes package (read vgpukit.node instead):\n" + "\n".join(bad)
    g = {"vgpukit.metrics.snapshot": {"vgpukit.node.x"}, "vgpukit.node.x": {"vgpukit.k8s.inventory"}}
    assert below_kubernetes(g) == [
        "vgpukit.metrics.snapshot -> vgpukit.k8s.inventory",
        "vgpukit.node.x -> vgpukit.k8s.inventory",
    ]
