"""The simulator holds its own facts: it imports none of the toolkit's domain modules.

Were it to compute its answers with the toolkit's formulas or catalogues, a wrong formula would be
wrong on both sides and every test would pass. What it may use: the host door, errors, input hygiene,
the NVML facade's records (and the MIG tables of the simulated driver), the loggers, and its own modules.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import vgpukit

PKG = Path(vgpukit.__file__).parent
# the simulator's own modules; its front end (sim/cli.py, sim/cli_*.py) is the product's, not the simulator's facts
SIM_FILES = [p for p in sorted((PKG / "sim").glob("*.py")) if p.stem != "cli" and not p.stem.startswith("cli_")]
ALLOWED = {
    "vgpukit.errors",
    "vgpukit.host",
    "vgpukit.host.notify",  # the host door's inotify (the simulated kernel's feed, its NVML events)
    "vgpukit.inputs",
    "vgpukit.stopping",  # readable(): waiting on a file descriptor (no facts, no rules)
    "vgpukit.logs",  # the loggers and the `vgpukit: warning:` prefix (no facts, no rules)
    "vgpukit.nvml",
    "vgpukit.nvml.model",  # the facade's records (GiProfile, NvmlGpu, ...)
    "vgpukit.nvml.errors",
    "vgpukit.nvml.table",  # the MIG profile tables the simulated NVIDIA driver plays
}
DOMAIN = ("vgpukit.vgpu", "vgpukit.pci", "vgpukit.mdev", "vgpukit.mig", "vgpukit.sriov", "vgpukit.naming")
DOMAIN += ("vgpukit.topology", "vgpukit.holders", "vgpukit.engine", "vgpukit.cli")


def _is_module(name: str) -> bool:
    """``from . import table`` names the module vgpukit.nvml.table; ``from . import GiProfile`` a record."""
    rel = Path(*name.split(".")[1:])
    return (PKG / rel).with_suffix(".py").is_file() or (PKG / rel / "__init__.py").is_file()


def _imports(path: Path) -> set[str]:
    module = "vgpukit." + ".".join(path.relative_to(PKG).with_suffix("").parts)
    package = module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("vgpukit")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
                out |= {
                    f"{name}.{a.name}" if not node.module and _is_module(f"{name}.{a.name}") else name
                    for a in node.names
                }
            elif node.module and node.module.startswith("vgpukit"):
                out.add(node.module)
    return out


def test_simulator_modules_import_only_the_host_door_and_their_own() -> None:
    bad = {}
    for path in SIM_FILES:
        wrong = {m for m in _imports(path) if not (m in ALLOWED or m.startswith("vgpukit.sim"))}
        if wrong:
            bad[str(path.relative_to(PKG))] = sorted(wrong)
    assert bad == {}


SCRIPT = """
import json, sys, tempfile, uuid
from pathlib import Path
from vgpukit.sim.build import init_sim
from vgpukit.sim.kernel import SimKernel
from vgpukit.sim.nvml import SimNvml
base = Path(tempfile.mkdtemp())
for profile in ("hgx-a100", "t4-mdev", "h100-vgpu", "qemu-guest"):
    init_sim(base / profile, profile)
dev = lambda p, bdf, *a: base.joinpath(p, "sys/bus/pci/devices", bdf, *a)
SimKernel(base / "hgx-a100").write(dev("hgx-a100", "0000:05:00.0", "sriov_numvfs"), "4")
SimKernel(base / "hgx-a100").write(base / "hgx-a100/sys/bus/pci/drivers/mlx5_core/unbind", "0000:05:00.2")
SimKernel(base / "t4-mdev").write(dev("t4-mdev", "0000:3b:00.0", "mdev_supported_types/nvidia-232/create"),
                                  str(uuid.uuid4()))
vf = (dev("h100-vgpu", "0000:41:00.0", "virtfn0")).resolve()
SimKernel(base / "h100-vgpu").write(vf / "nvidia/current_vgpu_type", "1052")
SimNvml(base / "hgx-a100").gpus()
print(json.dumps(sorted(m for m in sys.modules if m.startswith("vgpukit"))))
import shutil; shutil.rmtree(base)
"""


def test_simulator_runs_without_loading_the_toolkit_domain() -> None:
    """Build every profile and play reactions of each kind in a fresh interpreter: no domain module loads."""
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert "vgpukit.sim.reactions_vgpu" in loaded
    assert [m for m in loaded if m.startswith(DOMAIN)] == []
