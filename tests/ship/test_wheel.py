"""The wheel works without this checkout: built by ``python -m build`` (sdist, then the wheel from the
sdist), installed into a brand-new venv outside the tree (no PYTHONPATH, dependencies from the
wheelhouse with --no-index), every read-only command run on a simulated host (docs/install.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import invoke

from .conftest import ROOT, clean_env, version, wheelhouse

MIG_CONFIG = "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n"


@pytest.fixture(scope="module")
def venv(dists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("wheel-venv")
    v = where / "venv"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", str(v)], check=True, env=clean_env())
    house = wheelhouse(dists["wheel"])
    subprocess.run(
        [str(v / "bin" / "pip"), "install", "-q", "--no-index", "--find-links", str(house), str(dists["wheel"])],
        check=True,
        env=clean_env(),
        cwd=where,
    )
    return v


def _run(v: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(v / "bin" / "vgpukit"), *args], capture_output=True, text=True, env=clean_env(), cwd=v.parent
    )
    if ok:
        assert done.returncode == 0, (args, done.stderr)
    return done


@pytest.mark.ship
def test_wheel_holds_what_commands_need(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as whl:
        names = whl.namelist()
    data = f"vgpukit-{version()}.data/data/"
    for want in (
        "share/man/man1/vgpukit.1",
        "share/bash-completion/completions/vgpukit",
        "lib/vgpukit/libvgpukit-cuda.so",
    ):
        assert data + want in names
    for prefix in (
        "vgpukit/_templates/systemd/",
        "vgpukit/_templates/libvirt/",
        "vgpukit/data/schemas/",
        "vgpukit/sim/profiles/",
    ):
        assert any(n.startswith(prefix) for n in names), prefix
    assert dists["wheel"].name.endswith("-py3-none-linux_x86_64.whl")  # platform: the CUDA library
    with tarfile.open(dists["sdist"]) as tar:
        sdist = tar.getnames()
    assert f"vgpukit-{version()}/contrib/cuda/Makefile" in sdist and f"vgpukit-{version()}/hatch_build.py" in sdist


@pytest.mark.ship
def test_clean_venv_runs_the_read_commands(venv: Path) -> None:
    assert not str(venv).startswith(str(ROOT))
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import vgpukit; print(vgpukit.__file__)"],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=venv.parent,
        check=True,
    ).stdout
    assert where.startswith(str(venv)), where
    assert _run(venv, "-V").stdout.split()[-1] == version()
    sim = venv.parent / "sim"
    _run(venv, "sim", "init", str(sim), "--profile", "hgx-a100")
    for cmd in (
        ["devices"],
        ["topo"],
        ["sriov", "list"],
        ["mdev", "list"],
        ["vgpu", "list"],
        ["mig", "status"],
        ["units", "list"],
    ):
        out = _run(venv, "--sim", str(sim), *cmd, "--json").stdout
        assert json.loads(out), cmd
    units = json.loads(_run(venv, "units", "list", "--json").stdout)
    assert {u["name"] for u in units["units"]} >= {"systemd/vgpukit-qos.service"}
    assert units["exec"] == str(venv / "bin" / "vgpukit")
    config = venv.parent / "mig.yaml"
    config.write_text(MIG_CONFIG)
    assert str(venv / "bin" / "vgpukit") in _run(venv, "--sim", str(sim), "mig", "service", "-f", str(config)).stdout
    _run(venv, "--sim", str(sim), "cdi", "generate")
    assert (sim / "etc" / "cdi").is_dir()
    xml = _run(
        venv,
        "--sim",
        str(sim),
        "render",
        "domain",
        "--name",
        "vm1",
        "--memory",
        "4096",
        "--vcpus",
        "4",
        "--device",
        "gpu0",
    ).stdout
    assert "<domain" in xml and "<hostdev" in xml
    assert (venv / "share" / "man" / "man1" / "vgpukit.1").read_text().startswith(".TH VGPUKIT 1")
    assert (venv / "lib" / "vgpukit" / "libvgpukit-cuda.so").read_bytes()[:4] == b"\x7fELF"


@pytest.mark.parametrize("shell, name", [("bash", "vgpukit.bash"), ("zsh", "_vgpukit"), ("fish", "vgpukit.fish")])
def test_shipped_completion_files_are_current(shell: str, name: str) -> None:
    """contrib/completion/ is what `vgpukit completion SHELL` prints (regenerate: see docs/install.md)."""
    result = invoke(None, "completion", shell)
    assert result.exit_code == 0
    assert (ROOT / "contrib" / "completion" / name).read_text() == result.stdout
