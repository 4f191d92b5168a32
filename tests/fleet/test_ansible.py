"""The Ansible module (contrib/ansible, vgpukit.host.vgpukit_apply) run by the real ansible-playbook
against several inventory hosts that are simulated hosts (connection local, one sim dir per host)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from tests.fleet.test_apply import sysfs

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / "contrib" / "ansible"
PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: GPU host layout
      vgpukit.host.vgpukit_apply:
        file: "{{ fleet_file }}"
        config: "{{ vgpukit_config }}"
        sim: "{{ vgpukit_sim }}"
        executable: "{{ vgpukit_exe }}"
"""
FLEET = """\
version: vgpukit.host/v1
configs:
  guest:
    sriov:
      - device: nvme0
        vfs: 2
        driver: vfio-pci
    mdev:
      - parent: mtty
        type: mtty-1
        count: 2
  a100:
    sriov:
      - match: ConnectX-6
        vfs: 3
    vfio:
      - device: nvme0
  broken:
    sriov:
      - device: nic9
        vfs: 1
"""
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def ansible_playbook() -> str:
    exe = Path(sys.executable).with_name("ansible-playbook")
    found = str(exe) if exe.exists() else shutil.which("ansible-playbook")
    assert found, "ansible-core is a [dev] dependency: pip install -e '.[dev]'"
    return found


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    hosts = {
        "node1": ("qemu-guest", "guest"),
        "node2": ("qemu-guest", "guest"),
        "node3": ("hgx-a100", "a100"),
        "node4": ("qemu-guest", "broken"),
    }
    sims = {name: make_sim(tmp_path / name, profile) for name, (profile, _) in hosts.items()}
    site(tmp_path, FLEET, {name: (sims[name], config) for name, (_, config) in hosts.items()})
    return tmp_path, sims


def site(where: Path, fleet: str, hosts: dict[str, tuple[Path, str]]) -> None:
    """fleet.yaml, an inventory of simulated hosts (name -> (sim dir, config name)) and the playbook."""
    (where / "fleet.yaml").write_text(fleet)
    vgpukit = Path(sys.executable).with_name("vgpukit")
    lines = ["all:", "  vars:", f"    fleet_file: {where / 'fleet.yaml'}", f"    vgpukit_exe: {vgpukit}"]
    lines += ["    ansible_connection: local", f"    ansible_python_interpreter: {sys.executable}", "  hosts:"]
    for name, (sim, config) in hosts.items():
        lines += [f"    {name}:", f"      vgpukit_sim: {sim}", f"      vgpukit_config: {config}"]
    (where / "inventory.yml").write_text("\n".join(lines) + "\n")
    (where / "site.yml").write_text(PLAYBOOK)


def play(where: Path, *args: str, hosts: int = 4) -> tuple[dict[str, tuple[int, int]], str]:
    """Run the playbook; per host (changed, failed) from the recap, and the output."""
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(where / ".ansible-tmp"),
        "ANSIBLE_REMOTE_TEMP": str(where / ".ansible-tmp"),
        "ANSIBLE_FORKS": "4",
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": str(ROOT),
    }
    cmd = [ansible_playbook(), "-i", str(where / "inventory.yml"), str(where / "site.yml"), *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    recap = {m[0]: (int(m[2]), int(m[4])) for m in RECAP.findall(r.stdout)}
    assert len(recap) == hosts, r.stdout + r.stderr
    return recap, r.stdout


def test_check_mode_then_apply_then_no_change_and_the_bad_config_fails_on_its_host_only(
    fleet: tuple[Path, dict[str, Path]],
) -> None:
    where, sims = fleet
    before = {name: sysfs(sim) for name, sim in sims.items()}
    recap, out = play(where, "--check", "--diff")
    assert recap == {"node1": (1, 0), "node2": (1, 0), "node3": (1, 0), "node4": (0, 1)}, out
    assert "+ create 2 VFs on 0000:00:02.0" in out  # diff mode shows the plan
    assert {name: sysfs(sim) for name, sim in sims.items()} == before  # check mode changed nothing

    recap, out = play(where)
    assert recap == {"node1": (1, 0), "node2": (1, 0), "node3": (1, 0), "node4": (0, 1)}, out
    # the failure is vgpukit's one-line error, on node4 only
    msg = f"{where / 'fleet.yaml'}:20:17: config broken: no nic9 on this host: it has no NICs (see: vgpukit devices)"
    assert f'fatal: [node4]: FAILED! => {{"changed": false, "error": "not-found", "msg": "{msg}"' in out, out
    assert out.count("fatal:") == 1
    for name, config in (("node1", "guest"), ("node3", "a100")):
        assert invoke(sims[name], "assert", "-f", str(where / "fleet.yaml"), "-c", config).exit_code == 0

    recap, out = play(where)
    assert recap == {"node1": (0, 0), "node2": (0, 0), "node3": (0, 0), "node4": (0, 1)}, out
