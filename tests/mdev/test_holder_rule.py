"""Who uses an mdev (docs/decisions.md, "In use"): a process with an fd on the device's VFIO group node
or cdev, or a running libvirt domain naming it -- not a process holding other VFIO files, not the
caller of the command (libvirtd running ``mdevctl stop`` for ``virsh nodedev-destroy``), not a defined
but stopped domain (simulated QEMU guest, mtty parent; libvirt's test driver)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import Result

from tests.conftest import Run, sim_host
from vgpukit.engine import Env
from vgpukit.errors import Busy
from vgpukit.mdev import ops
from vgpukit.mdev.domains import running_users

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
U2 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"


def mc(run: Run, sim: Path, *args: str) -> Result:
    return run(sim, "mdev", "--mdevctl", *args)


def _start(run: Run, sim: Path, uid: str) -> str:
    """Start ``uid``; its IOMMU group."""
    r = mc(run, sim, "start", "-u", uid, "-p", "mtty", "-t", "mtty-1")
    assert r.exit_code == 0, r.stderr
    return os.path.basename(os.readlink(sim / "sys/bus/mdev/devices" / uid / "iommu_group"))


def _process(sim: Path, pid: int, comm: str, ppid: int, fds: list[str], name: str | None = None) -> None:
    """A process entry in the simulated /proc (stat, comm, cmdline, fd links), as the kernel shows it."""
    d = sim / "proc" / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1\n")
    (d / "cmdline").write_text(comm + "\0" + (f"-name\0guest={name}\0" if name else "--daemon\0"))
    for n, target in enumerate(fds, start=20):
        os.symlink(target, d / "fd" / str(n))


def test_sim_hold_blocks_stop(qemu_sim: Path, run_cli: Run) -> None:
    _start(run_cli, qemu_sim, U1)
    assert run_cli(qemu_sim, "sim", "hold", U1, "--vm", "web1").exit_code == 0
    r = mc(run_cli, qemu_sim, "stop", "-u", U1)
    assert r.exit_code == 4 and "in use by web1" in r.stderr


def test_a_process_holding_other_vfio_files_does_not_block(qemu_sim: Path, run_cli: Run) -> None:
    group = _start(run_cli, qemu_sim, U1)
    other = _start(run_cli, qemu_sim, U2)
    assert group != other
    _process(qemu_sim, 39990, "libvirtd", 1, ["/dev/vfio/vfio", f"/dev/vfio/{other}", "/dev/vfio/devices/vfio7"])
    assert mc(run_cli, qemu_sim, "stop", "-u", U1).exit_code == 0
    r = mc(run_cli, qemu_sim, "stop", "-u", U2)  # libvirtd holds U2's group node: it counts there
    assert r.exit_code == 4 and "in use by libvirtd (pid 39990)" in r.stderr


def _cdev(sim: Path, uid: str, name: str = "vfio5") -> str:
    """The device's VFIO cdev (``vfio-dev/vfioN``, kernels with VFIO's device cdev); its /dev node."""
    (sim / "sys/bus/mdev/devices" / uid / "vfio-dev" / name).mkdir(parents=True)
    return f"/dev/vfio/devices/{name}"


def test_the_device_cdev_counts(qemu_sim: Path, run_cli: Run) -> None:
    _start(run_cli, qemu_sim, U1)
    _process(qemu_sim, 39992, "qemu-system-x86_64", 1, [_cdev(qemu_sim, U1)], name="web2")
    r = mc(run_cli, qemu_sim, "stop", "-u", U1)
    assert r.exit_code == 4 and "in use by web2 (pid 39992)" in r.stderr


def test_the_caller_is_not_a_user(qemu_sim: Path, run_cli: Run) -> None:
    """libvirtd runs ``mdevctl stop -u U`` for ``virsh nodedev-destroy``: even with the device's VFIO
    file open, the command's caller (not a VM) does not block it; a VM that is the caller does."""
    _start(run_cli, qemu_sim, U1)
    node = _cdev(qemu_sim, U1)
    _process(qemu_sim, os.getpid(), "mdevctl", 39991, [])  # this command, run by "libvirtd"
    _process(qemu_sim, 39991, "libvirtd", 1, [node])
    r = mc(run_cli, qemu_sim, "stop", "-u", U1)
    assert r.exit_code == 0, r.stderr
    _start(run_cli, qemu_sim, U1)
    node = _cdev(qemu_sim, U1)
    (qemu_sim / "proc/39991/cmdline").write_text("qemu-system-x86_64\0-name\0guest=web9\0")  # a VM counts
    r = mc(run_cli, qemu_sim, "stop", "-u", U1)
    assert r.exit_code == 4 and "in use by web9" in r.stderr


def test_a_running_domain_blocks_a_stopped_one_does_not(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    pytest.importorskip("libvirt")
    node = tmp_path / "node.xml"
    dev = "<devices><hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{}'/>"
    dev += "</source></hostdev></devices>"
    node.write_text(
        f"""<node>
  <domain type='test'><name>web1</name><memory>1024</memory><os><type>hvm</type></os>{dev.format(U1)}</domain>
  <domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'><name>idle</name>
    <memory>1024</memory><os><type>hvm</type></os>{dev.format(U2)}<test:runstate>5</test:runstate></domain>
</node>"""
    )
    running = running_users(f"test://{node}")
    assert running == {U1: ["web1"], U2: []}
    _start(run_cli, qemu_sim, U1)
    _start(run_cli, qemu_sim, U2)
    env = Env(sim_host(qemu_sim))
    with pytest.raises(Busy, match="in use by domain web1"):
        ops.remove(env, [U1], uri=f"test://{node}")
    assert ops.remove(env, [U2], uri=f"test://{node}") == [f"remove {U2} (mtty-1 on mtty)"]
