"""Project rules that are cheap to check mechanically."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "vgpukit"
HOST_LITERAL = re.compile(r"""["'](/sys|/proc|/dev|/etc|/run|/var/run)(/|["'])""")
MAX_MODULE_LINES = 450


def _sources() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def test_host_paths_only_in_the_host_door() -> None:
    offenders = []
    for path in _sources():
        if path.parent == PKG / "host" and path.name in ("contain.py", "kernel_paths.py", "file_places.py"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith("#") or not HOST_LITERAL.search(line):
                continue
            offenders.append(f"{path.relative_to(ROOT)}:{n}: {stripped}")
    assert not offenders, "host paths built outside the host door (vgpukit/host/):\n" + "\n".join(offenders)


def test_no_patching_of_open_or_os_in_tests() -> None:
    bad = re.compile(r"""(mock\.patch|monkeypatch\.setattr)\(\s*["'](builtins\.open|os\.[a-z_.]+)["']""")
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((ROOT / "tests").rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if bad.search(line)
    ]
    assert not offenders, offenders


def test_modules_stay_small() -> None:
    big = [
        f"{p.relative_to(ROOT)}: {n}" for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not big, f"modules over {MAX_MODULE_LINES} lines (split by what they hold: docs/decisions.md): {big}"


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from vgpukit.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = {'rich', 'jinja2', 'yaml', 'pynvml', 'libvirt', 'pyudev', 'prometheus_client'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[]"


# Layering (nothing below the front ends imports them, no import cycles): tests/core/test_import_graph.py


# what only the commands that change things need: planners, steps, mig-parted and mdevctl-define code,
# the change engine, mdevctl's call-out runner, libvirt, the simulated kernel's write machinery
CHANGE_MODULES = (
    "vgpukit.mig.layout",
    "vgpukit.mig.cli_config",
    "vgpukit.sriov.planner",
    "vgpukit.mig.steps",
    "vgpukit.sriov.steps",
    "vgpukit.mdev.ops",
    "vgpukit.mdev.cli_change",
    "vgpukit.mdev.callouts",
    "vgpukit.mdev.domains",
    "vgpukit.mdev.placement",
    "vgpukit.vgpu.ops",
    "vgpukit.mdev.planner",
    "vgpukit.vgpu.planner",
    "vgpukit.engine",
    "vgpukit.libvirt",
    "vgpukit.sim.tree",
)
READ_COMMANDS = (["devices"], ["topo"], ["sriov", "list"], ["mdev", "list"], ["vgpu", "list"], ["mig", "status"])
# mdevctl's read verbs (what libvirt runs whenever /etc/mdevctl.d changes) load no click either
SHIM_READS = (["list"], ["list", "--defined", "--dumpjson"], ["types"], ["types", "--dumpjson"], ["list", "-d", "-v"])


def test_read_only_commands_import_nothing_heavy(tmp_path: Path) -> None:
    """The read-only commands whose start-up the benchmark times load neither the heavy libraries (YAML is
    parsed only where a document is read) nor the simulator's reactions (a read makes no write to react
    to) nor the change machinery; click is the one dependency, and the mdevctl shim's reads load none."""
    from vgpukit.sim.build import init_sim

    heavy = {"rich", "jinja2", "yaml", "pynvml", "libvirt", "pyudev", "prometheus_client", "jsonschema"}
    shim = [["mdev", "--mdevctl", *words] for words in SHIM_READS]
    # the small host with mdev parents (the shim's reads), and the biggest with MIG GPUs (their tables)
    runs = [("qemu-guest", command) for command in [*READ_COMMANDS, *shim]]
    runs += [("hgx-a100", command) for command in READ_COMMANDS]
    for profile, command in runs:
        sim = tmp_path / profile
        if not sim.exists():
            init_sim(sim, profile)
        # the shim: not even the standard modules a dataclass or a log would bring (msgspec, the value
        # types' library, brings uuid; typing_extensions and its inspect are kept out: vgpukit/cli/entry.py,
        # docs/decisions.md, "Value types"; benchmarks/cli times it)
        shim_banned = ["click", "dataclasses", "logging", "typing_extensions", "inspect"]
        # a read logs nothing: logging comes with the modules that log (vgpukit.logs)
        banned = [*CHANGE_MODULES, *shim_banned] if "--mdevctl" in command else [*CHANGE_MODULES, "logging"]
        code = (
            "import sys\n"
            "from vgpukit.cli.entry import main\n"  # what the installed command runs
            f"try:\n    main(['--sim', {str(sim)!r}, *{command!r}])\nexcept SystemExit:\n    pass\n"
            f"heavy = {sorted(heavy)!r}\n"
            "loaded = [m for m in sys.modules if m.split('.')[0] in heavy or m.startswith('vgpukit.sim.reactions')]\n"
            # a read-only command does not load the planners and mig-parted code its group's other commands use
            f"loaded += [m for m in {banned!r} if m in sys.modules]\n"
            "print(sorted(loaded), file=sys.stderr)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
        assert out.stderr.strip().splitlines()[-1] == "[]", (profile, command, out.stderr[-2000:])
