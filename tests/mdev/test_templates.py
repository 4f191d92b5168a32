"""The boot-time templates run commands that exist and work (checked on the simulator)."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

from tests.conftest import Run, as_json

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"


def _unit(name: str) -> configparser.ConfigParser:
    """The unit as `vgpukit units install` writes it (for a vgpukit installed as /usr/bin/vgpukit)."""
    from vgpukit.cli.cmd_units import render

    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(render(TEMPLATES / "systemd" / name, "/usr/bin/vgpukit"))
    return cp


def _vgpukit_args(exec_start: str, instance: str = "") -> list[str]:
    argv = shlex.split(exec_start.replace("%I", instance))
    assert argv[0].endswith("/vgpukit")
    return argv[1:]


def test_restore_unit_runs_start_all(qemu_sim: Path, run_cli: Run) -> None:
    unit = _unit("vgpukit-mdev-restore.service")
    assert unit["Service"]["Type"] == "oneshot" and unit["Install"]["WantedBy"] == "multi-user.target"
    run_cli(qemu_sim, "mdev", "define", "--parent", "mtty", "--type", "mtty-2", "--uuid", U1, "--auto")
    r = run_cli(qemu_sim, *_vgpukit_args(unit["Service"]["ExecStart"]), "--json")
    assert r.exit_code == 0 and as_json(r)["results"][0]["status"] == "started"


def test_udev_rule_starts_the_per_parent_unit(qemu_sim: Path, run_cli: Run) -> None:
    rules = [
        ln for ln in (TEMPLATES / "udev" / "60-vgpukit-mdev.rules").read_text().splitlines() if ln and ln[0] != "#"
    ]
    (rule,) = rules
    assert 'ENV{MDEV_STATE}=="registered"' in rule and 'TEST=="/etc/mdevctl.d/$kernel"' in rule
    m = re.search(r"start (vgpukit-mdev-start)@\$kernel\.service", rule)
    assert m
    unit = _unit(f"{m.group(1)}@.service")
    run_cli(qemu_sim, "mdev", "define", "--parent", "mtty", "--type", "mtty-1", "--uuid", U1, "--auto")
    r = run_cli(qemu_sim, *_vgpukit_args(unit["Service"]["ExecStart"], "mtty"), "--json")
    assert r.exit_code == 0 and [x["uuid"] for x in as_json(r)["results"]] == [U1]


def test_mdevctl_and_lsmdev_shims_run_vgpukit(qemu_sim: Path) -> None:
    """templates/bin/{mdevctl,lsmdev}, as installed: real processes finding vgpukit on PATH."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "VGPUKIT_SIM": str(qemu_sim),
    }

    def shim(name: str, *args: str) -> str:
        proc = subprocess.run([TEMPLATES / "bin" / name, *args], env=env, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    new = shim("mdevctl", "start", "-p", "mtty", "-t", "mtty-1").strip()
    assert shim("lsmdev") == f"{new} mtty mtty-1 manual\n\n"
    assert shim("mdevctl", "list", "--dumpjson", "-u", new) == (
        '{\n  "mdev_type": "mtty-1",\n  "start": "manual",\n  "attrs": []\n}\n'
    )
