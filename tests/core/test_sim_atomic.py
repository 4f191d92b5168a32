"""Kernel reactions are atomic per write, as the kernel's are: a killed process leaves no half-done reaction.

A real subprocess writes ``sriov_numvfs`` (256 VFs created or destroyed in one reaction) and is
SIGKILLed at seeded random points; the next command on the sim host must see exactly the before- or
the after-state of that write, and ``sriov enable`` must then converge.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from tests.conftest import sim_host
from vgpukit.sim.build import init_sim
from vgpukit.sim.state import KernelState

PF = "0000:00:02.0"
VFS = 256
PROFILE = f"""
version: 1
name: big-sriov
description: one NVMe PF with {VFS} VFs
numa_nodes: {{0: 0-3}}
drivers:
  nvme: ['1b36:0010']
  vfio-pci: []
vf_models: {{'1b36:0010': vf}}
models:
  pf: {{ids: '1b36:0010', class: '0x010802', sriov: {{total_vfs: {VFS}, vf_device: '10', offset: 1, stride: 1}}}}
  vf: {{ids: '1b36:0010', class: '0x010802'}}
host_bridges:
- name: pci0000:00
  numa: 0
  devices:
  - {{bdf: '{PF}', model: pf}}
"""
WRITER = """
import sys
from pathlib import Path
from vgpukit.sim.kernel import SimKernel
kernel = SimKernel(Path(sys.argv[1]))
print("go", flush=True)
kernel.write(Path(sys.argv[2]), sys.argv[3])
"""


def _links(d: Path, prefix: str = "") -> dict[str, str]:
    return {n: os.path.realpath(d / n) for n in os.listdir(d) if n.startswith(prefix) and (d / n).is_symlink()}


def check_consistent(sim: Path) -> int:
    """Every cross-reference of the tree holds; returns the VF count."""
    sys_ = sim / "sys"
    assert not (sim / ".vgpukit-sim" / "inflight.jsonl").exists()
    pf_dir = Path(os.path.realpath(sys_ / "bus/pci/devices" / PF))
    n = int((pf_dir / "sriov_numvfs").read_text())
    virtfns = _links(pf_dir, "virtfn")
    assert sorted(virtfns) == sorted(f"virtfn{i}" for i in range(n))
    vf_dirs = {str(d) for d in pf_dir.parent.iterdir() if (d / "physfn").is_symlink()}
    assert vf_dirs == set(virtfns.values())
    assert all(os.path.realpath(Path(d) / "physfn") == str(pf_dir) for d in vf_dirs)
    bus = _links(sys_ / "bus/pci/devices")
    assert all(os.path.isdir(t) for t in bus.values()), "dangling bus links"
    assert set(bus.values()) == vf_dirs | {str(pf_dir)}
    groups_dir = sys_ / "kernel/iommu_groups"
    members: dict[str, str] = {}
    for g in os.listdir(groups_dir):
        devs = _links(groups_dir / g / "devices")
        assert devs, f"empty IOMMU group {g}"
        for name, target in devs.items():
            assert os.path.realpath(Path(target) / "iommu_group") == str(groups_dir / g)
            members[name] = g
    assert set(members) == set(bus)
    state = KernelState.load(sim)  # kernel.json with the changes logged since (kernel.jsonl)
    assert state.next_group > max(int(g) for g in members.values())
    for drv in os.listdir(sys_ / "bus/pci/drivers"):
        for name, target in _links(sys_ / "bus/pci/drivers" / drv).items():
            assert os.path.realpath(Path(target) / "driver") == str(sys_ / "bus/pci/drivers" / drv), name
    for bdf, d in bus.items():
        drv = Path(d) / "driver"
        if drv.is_symlink():
            assert os.path.lexists(Path(os.path.realpath(drv)) / bdf)
    return n


def _kill_during(sim: Path, value: str, delay: float) -> bool:
    """Start a writer, SIGKILL it ``delay`` s into its write; True when that cut a reaction short."""
    attr = sim / "sys/bus/pci/devices" / PF / "sriov_numvfs"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(sim), str(attr), value], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"go\n"
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return (sim / ".vgpukit-sim" / "inflight.jsonl").exists()


def test_killed_reactions_leave_before_or_after_state(tmp_path: Path, run_cli: Callable[..., Result]) -> None:
    profile = tmp_path / "big.yaml"
    profile.write_text(PROFILE)
    sim = tmp_path / "host"
    init_sim(sim, str(profile))
    h = sim_host(sim)
    t0 = time.monotonic()
    h.write(h.pci_device(PF, "sriov_numvfs"), str(VFS))  # how long one whole reaction takes here
    took = time.monotonic() - t0
    h.write(h.pci_device(PF, "sriov_numvfs"), "0")
    rng = random.Random(20261123)
    cut = 0
    vfs = check_consistent(sim)
    for _ in range(10):
        cut += _kill_during(sim, "0" if vfs else str(VFS), rng.uniform(0.05, 0.7) * took)
        nxt = run_cli(sim, "sim", "info")  # the next command: opening the sim host completes or undoes
        assert nxt.exit_code == 0, nxt.output
        vfs = check_consistent(sim)
        assert vfs in (0, VFS)
    assert cut >= 3, f"only {cut} of 10 kills landed inside a reaction"
    listing = run_cli(sim, "sriov", "list", "--json")
    assert listing.exit_code == 0, listing.output
    done = run_cli(sim, "sriov", "enable", PF, "--vfs", str(VFS))
    assert done.exit_code == 0, done.output
    assert check_consistent(sim) == VFS


def test_a_log_left_behind_is_undone_on_open_even_with_a_torn_last_line(tmp_path: Path) -> None:
    from vgpukit.sim.journal import Journal
    from vgpukit.sim.kernel import SimKernel
    from vgpukit.sim.tree import SimTree

    sim = tmp_path / "host"
    init_sim(sim, "qemu-guest")
    pf_dir = Path(os.path.realpath(sim / "sys/bus/pci/devices" / PF))
    before = {p: (p.is_symlink(), p.read_bytes() if p.is_file() else None) for p in sorted(sim.rglob("*"))}
    journal = Journal(sim, sim / ".vgpukit-sim", {"path": "sys/x", "value": "1"})
    tree = SimTree(sim, journal)
    tree.write_attr(pf_dir / "sriov_numvfs", 2)
    tree.write_attr(pf_dir / "new_dir" / "attr", "x")
    tree.link(pf_dir / "virtfn0", pf_dir.parent)
    tree.unlink(pf_dir / "subsystem")
    tree.remove_tree(sim / "sys/kernel/iommu_groups" / "0")
    assert journal.fd is not None
    os.write(journal.fd, b'{"kind": "absent", "pa')  # the process died while writing a record
    os.close(journal.fd)
    SimKernel(sim)  # the next command opens the sim host
    after = {p: (p.is_symlink(), p.read_bytes() if p.is_file() else None) for p in sorted(sim.rglob("*"))}
    after.pop(sim / ".vgpukit-sim" / "lock", None)
    before.pop(sim / ".vgpukit-sim" / "lock", None)
    assert after == before
