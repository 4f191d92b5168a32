"""mig-parted's real clients over vgpukit's ``nvidia-mig-parted`` (templates/bin/nvidia-mig-parted):
the GPU operator's reconfigure-mig.sh and the systemd service's service.sh reconfigure a simulated
host from one named config to another (docs/mig.md, "The nvidia-mig-parted command").

In every run: their command lines as transcribed in tests/mig/migparted_clients.py (upstream path and
commit cited there), each run as a process through the shim. With ``VGPUKIT_MIG_PARTED_SRC`` set to a
mig-parted checkout (or its git directory), the scripts themselves also run, unchanged, in a private
mount namespace (root): only ``kubectl``, ``systemctl`` and ``nvidia-smi`` are stubs, ``/etc`` is an
overlay so the service's files can sit in ``/etc/nvidia-mig-manager`` as its package puts them, and
``/proc/modules`` lists the nvidia module. Upstream code is never copied into this repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import invoke
from tests.engine.helpers import fresh
from tests.mig import migparted_clients as clients

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "templates" / "bin" / "nvidia-mig-parted"
BIN = Path(sys.executable).parent  # where `vgpukit` is installed

# Named configs in config-default.yaml's shape (written here): an A100-40GB in each layout.
CONFIGS = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.5gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
  all-balanced:
    - device-filter: ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F310DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
"""
HOOKS = """version: v1
hooks:
  apply-start:
    - command: /bin/sh
      args: ["-c", "echo apply-start $MIG_PARTED_SELECTED_CONFIG >> hooks.log"]
      workdir: {dir}
"""


def shim_runner(sim: Path, log: list[str]) -> clients.Run:
    def run(args: list[str], env: dict[str, str]) -> int:
        full = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "VGPUKIT_SIM": str(sim), **env}
        for name in ("VGPUKIT_MIG_CONFIG_FILE", "VGPUKIT_MIG_SELECTED_CONFIG", "VGPUKIT_MIG_HOOKS_FILE"):
            full.pop(name, None)
        r = subprocess.run([str(SHIM), *args], env=full, capture_output=True, text=True, timeout=120)
        log.append(f"nvidia-mig-parted {' '.join(args)} -> {r.returncode}")
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
        return r.returncode

    return run


def layout(sim: Path, config_file: Path, name: str) -> bool:
    return invoke(sim, "mig", "assert", "-f", str(config_file), "-c", name).exit_code == 0


def test_service_then_the_gpu_operator_reconfigure_a_host(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    currdir = tmp_path / "nvidia-mig-manager"
    currdir.mkdir()
    (currdir / "config-default.yaml").write_text(CONFIGS)
    (currdir / "hooks.yaml").write_text(HOOKS.format(dir=currdir))
    log: list[str] = []
    run = shim_runner(sim, log)
    # boot: nvidia-mig-manager.service with MIG_PARTED_SELECTED_CONFIG=all-1g.5gb (MIG off before)
    assert clients.service(run, currdir, "all-1g.5gb") == 0, log
    config = currdir / "config.yaml"
    assert layout(sim, config, "all-1g.5gb") and not layout(sim, config, "all-balanced")
    assert log[:5] == [
        f"nvidia-mig-parted generate-config -f {config}.tmp -> 5",  # not done: the shipped default is used
        "nvidia-mig-parted assert --mode-only -> 1",
        "nvidia-mig-parted apply --mode-only --skip-reset -> 0",
        "nvidia-mig-parted apply --mode-only -> 0",
        "nvidia-mig-parted apply -> 0",
    ], log
    assert (currdir / "hooks.log").read_text() == "apply-start all-1g.5gb\n" * 3  # each apply ran the hook
    # the GPU operator: the node's nvidia.com/mig.config label changes to all-balanced
    log.clear()
    assert clients.reconfigure_mig(run, str(config), "all-balanced") == "success", log
    assert layout(sim, config, "all-balanced")
    assert log == [
        f"nvidia-mig-parted assert --valid-config -f {config} -c all-balanced -> 0",
        f"nvidia-mig-parted assert -f {config} -c all-balanced -> 1",
        f"nvidia-mig-parted assert --mode-only -f {config} -c all-balanced -> 0",
        f"nvidia-mig-parted -d apply --mode-only -f {config} -c all-balanced -> 0",
        f"nvidia-mig-parted -d assert --mode-only -f {config} -c all-balanced -> 0",
        f"nvidia-mig-parted -d apply -f {config} -c all-balanced -> 0",
    ]
    log.clear()  # again: the first assert says it is applied
    assert clients.reconfigure_mig(run, str(config), "all-balanced") == "success"
    assert len(log) == 2
    # and back to MIG off, as the label all-disabled asks
    assert clients.reconfigure_mig(run, str(config), "all-disabled") == "success"
    assert layout(sim, config, "all-disabled")
    exported = invoke(sim, "mig", "--mig-parted", "export", "-o", "json")
    assert exported.exit_code == 0 and json.loads(exported.stdout)["mig-configs"]["current"][0]["mig-enabled"] is False


def test_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    config = tmp_path / "c.yaml"
    config.write_text(CONFIGS)
    r = invoke(sim, "mig", "--mig-parted", "--version")
    assert r.exit_code == 0 and r.stdout.startswith("nvidia-mig-parted version vgpukit ")
    assert invoke(sim, "mig", "--mig-parted", "--help").stdout.startswith("usage: nvidia-mig-parted")
    assert invoke(sim, "mig", "--mig-parted").exit_code == 2
    r = invoke(sim, "mig", "--mig-parted", "frobnicate")
    assert r.exit_code == 2 and "no such command 'frobnicate'" in r.stderr
    r = invoke(sim, "mig", "--mig-parted", "checkpoint")
    assert r.exit_code == 5 and r.stderr.count("\n") == 1
    bad = invoke(sim, "mig", "--mig-parted", "-x", "apply")
    assert bad.exit_code == 2 and "unknown global option '-x'" in bad.stderr
    # -d is mig-parted's global debug flag; --valid-config from MIG_PARTED_VALID_CONFIG
    check = ("-f", str(config), "-c", "all-1g.5gb")
    assert invoke(sim, "mig", "--mig-parted", "-d", "assert", "-a", *check).exit_code == 0
    assert invoke(sim, "mig", "--mig-parted", "assert", *check).exit_code == 1
    monkeypatch.setenv("MIG_PARTED_VALID_CONFIG", "true")
    assert invoke(sim, "mig", "--mig-parted", "assert", *check).exit_code == 0


UPSTREAM = os.environ.get("VGPUKIT_MIG_PARTED_SRC")

if UPSTREAM:  # opt-in: collected only with a mig-parted checkout at hand (CI has none: no network)
    from tests.mig.migparted_real import run_real_scripts

    def test_the_real_scripts_unchanged(tmp_path: Path) -> None:
        run_real_scripts(Path(str(UPSTREAM)), tmp_path, CONFIGS)
