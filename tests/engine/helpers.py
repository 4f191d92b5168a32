"""Run vgpukit as real processes against simulated hosts, and read a host's facts back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import remove_at_session_end
from vgpukit.sim.build import init_sim

_PRISTINE: dict[str, Path] = {}


def fresh(tmp: Path, profile: str, name: str = "host") -> Path:
    """A simulated host: the first of a profile is built, later ones are copies (fast)."""
    base = Path(os.environ.get("TMPDIR", "/tmp")) / f"vgpukit-engine-pristine-{os.getpid()}-{profile}"
    if profile not in _PRISTINE or not base.exists():
        shutil.rmtree(base, ignore_errors=True)
        init_sim(base, profile)
        if profile not in _PRISTINE:
            remove_at_session_end(base)
        _PRISTINE[profile] = base
    dst = tmp / name
    shutil.copytree(base, dst, symlinks=True)
    return dst


def vgpukit(
    sim: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "vgpukit", "--sim", str(sim), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


def start(sim: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vgpukit", "--sim", str(sim), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def facts(sim: Path) -> dict[str, Any]:
    """What an operator would check: every SR-IOV PF's VFs, drivers, autoprobe; bind records;
    mdev instances and definitions; the journal."""
    out: dict[str, Any] = {}
    r = vgpukit(sim, "sriov", "list", "--json")
    assert r.returncode == 0, r.stderr
    out["pfs"] = {
        p["bdf"]: {"autoprobe": p["autoprobe"], "vfs": [(v["bdf"], v["driver"]) for v in p["vfs"]]}
        for p in json.loads(r.stdout)["pfs"]
    }
    bind_dir = sim / "run" / "vgpukit" / "bind"
    out["records"] = {p.name: p.read_text() for p in sorted(bind_dir.glob("*.json"))} if bind_dir.is_dir() else {}
    mdevs = sim / "sys" / "bus" / "mdev" / "devices"
    out["mdevs"] = sorted(os.listdir(mdevs)) if mdevs.is_dir() else []
    defs = sim / "etc" / "mdevctl.d"
    out["definitions"] = (
        sorted(str(p.relative_to(defs)) for p in defs.rglob("*") if p.is_file()) if defs.is_dir() else []
    )
    out["drivers"] = {
        d.name: os.path.basename(os.readlink(d / "driver")) if (d / "driver").is_symlink() else None
        for d in sorted((sim / "sys" / "bus" / "pci" / "devices").iterdir())
    }
    return out


def journal_left(sim: Path) -> bool:
    return (sim / "run" / "vgpukit" / "journal").exists()
