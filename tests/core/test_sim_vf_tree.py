"""What the simulated kernel's SR-IOV and binding reactions leave in the tree, entry by entry.

The reactions create files with their mode given at creation (no ``chmod`` after, unless the umask
would take bits away), log the paths they create in one batch and resolve links once per write; the
tree must come out exactly as the kernel shows it, whatever the umask of the process.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vgpukit.sim.build import init_sim
from vgpukit.sim.kernel import SimKernel

PF = "0000:05:00.0"  # nic0 of hgx-a100: a ConnectX-6 PF
PF_DIR = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:05:00.0"
UP = "../../../../../.."  # from a VF directory to the root of sys/


def _config() -> str:
    """A ConnectX-6 VF's configuration space: 15b3:101c, class 020000, header type 0, subsystem 15b3:0007."""
    data = bytearray(256)
    data[0:4] = bytes.fromhex("b3151c10")
    data[0x09:0x0C] = bytes.fromhex("000002")
    data[0x2C:0x30] = bytes.fromhex("b3150700")
    return bytes(data).decode("utf-8", "replace")


def _vf(bdf: str, group: int, override: str, bound: bool) -> dict[str, tuple[str, ...]]:
    d = f"{PF_DIR.rsplit('/', 1)[0]}/{bdf}"
    target = f"../../../{d[4:]}"
    out: dict[str, tuple[str, ...]] = {
        d: ("dir",),
        f"{d}/class": ("file", "0o444", "0x020000\n"),
        f"{d}/config": ("file", "0o444", _config()),
        f"{d}/device": ("file", "0o444", "0x101c\n"),
        f"{d}/driver_override": ("file", "0o644", override),
        f"{d}/enable": ("file", "0o644", "1\n"),
        f"{d}/iommu_group": ("link", f"{UP}/kernel/iommu_groups/{group}"),
        f"{d}/local_cpulist": ("file", "0o444", "0-31,64-95\n"),
        f"{d}/numa_node": ("file", "0o444", "0\n"),
        f"{d}/physfn": ("link", "../0000:05:00.0"),
        f"{d}/subsystem": ("link", f"{UP}/bus/pci"),
        f"{d}/subsystem_device": ("file", "0o444", "0x0007\n"),
        f"{d}/subsystem_vendor": ("file", "0o444", "0x15b3\n"),
        f"{d}/vendor": ("file", "0o444", "0x15b3\n"),
        f"sys/bus/pci/devices/{bdf}": ("link", target),
        f"sys/kernel/iommu_groups/{group}": ("dir",),
        f"sys/kernel/iommu_groups/{group}/devices": ("dir",),
        f"sys/kernel/iommu_groups/{group}/devices/{bdf}": ("link", f"../{target}"),
        f"sys/kernel/iommu_groups/{group}/type": ("file", "0o444", "DMA-FQ\n"),
    }
    if bound:
        out[f"{d}/driver"] = ("link", f"{UP}/bus/pci/drivers/vfio-pci")
        out[f"sys/bus/pci/drivers/vfio-pci/{bdf}"] = ("link", f"../{target}")
        out[f"dev/vfio/{group}"] = ("file", "0o644", f"simulated character device 243:{group}\n")
    return out


EXPECTED = {
    **_vf("0000:05:00.2", 37, "vfio-pci\n", bound=True),
    **_vf("0000:05:00.3", 38, "(null)\n", bound=False),
    f"{PF_DIR}/sriov_drivers_autoprobe": ("file", "0o644", "0\n"),
    f"{PF_DIR}/sriov_numvfs": ("file", "0o644", "2\n"),
    f"{PF_DIR}/virtfn0": ("link", "../0000:05:00.2"),
    f"{PF_DIR}/virtfn1": ("link", "../0000:05:00.3"),
}


def _entries(root: Path) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            rel = os.path.relpath(path, root)
            if rel.startswith(".vgpukit-sim"):
                continue
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)  # made with the process's umask, as every directory of the tree
            else:
                os.chmod(path, st.st_mode | 0o400)  # write-only attributes, when not root
                text = Path(path).read_bytes().decode("utf-8", "replace")
                os.chmod(path, st.st_mode)
                out[rel] = ("file", oct(stat.S_IMODE(st.st_mode)), text)
    return out


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o000])
def test_vf_creation_and_binding_leave_the_kernels_entries_with_their_modes(tmp_path: Path, umask: int) -> None:
    sim = tmp_path / "host"
    init_sim(sim, "hgx-a100")
    before = _entries(sim)
    old = os.umask(umask)
    try:
        kernel = SimKernel(sim)
        pf = sim / "sys/bus/pci/devices" / PF
        kernel.write(pf / "sriov_drivers_autoprobe", "0")
        kernel.write(pf / "sriov_numvfs", "2")
        kernel.write(sim / "sys/bus/pci/devices/0000:05:00.2/driver_override", "vfio-pci")
        kernel.write(sim / "sys/bus/pci/drivers_probe", "0000:05:00.2")
    finally:
        os.umask(old)
    after = _entries(sim)
    assert set(before) - set(after) == set()
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    assert changed == EXPECTED


def test_files_closed_together_never_close_a_descriptor_they_do_not_hold(tmp_path: Path) -> None:
    from vgpukit.sim.files import HeldOpen

    held, mine, others = HeldOpen(), [], []
    for i in range(12):
        mine.append(os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT, 0o644))
        if i in (3, 4, 9):  # someone else's, between ours
            others.append(os.open(tmp_path / f"g{i}", os.O_WRONLY | os.O_CREAT, 0o644))
    for fd in mine:
        held.hold(fd)
    held.close_all()
    try:
        for fd in others:
            os.fstat(fd)  # still open
        for fd in mine:
            with pytest.raises(OSError):
                os.fstat(fd)
    finally:
        for fd in others:
            os.close(fd)


def test_an_attribute_stored_by_rename_leaves_no_temporary_file_even_after_a_killed_store(tmp_path: Path) -> None:
    sim = tmp_path / "host"
    init_sim(sim, "hgx-a100")
    override = Path(os.path.realpath(sim / "sys/bus/pci/devices" / PF / "driver_override"))
    stale = sim / ".vgpukit-sim" / "store.tmp"
    stale.write_text("left by a process killed before its rename\n")
    SimKernel(sim).write(sim / "sys/bus/pci/devices" / PF / "driver_override", "vfio-pci")
    assert override.read_text() == "vfio-pci\n"
    assert stat.S_IMODE(override.stat().st_mode) == 0o644
    assert not stale.exists()
    assert not any(n.startswith(".") for n in os.listdir(override.parent))  # nothing added beside it


def test_no_change_may_follow_an_unlogged_store(tmp_path: Path) -> None:
    from vgpukit.sim.journal import Journal
    from vgpukit.sim.tree import SimTree

    sim = tmp_path / "host"
    init_sim(sim, "hgx-a100")
    pf_dir = Path(os.path.realpath(sim / "sys/bus/pci/devices" / PF))
    tree = SimTree(sim, Journal(sim, sim / ".vgpukit-sim", {"path": "x", "value": "1"}))
    tree.store(pf_dir / "driver_override", "vfio-pci")
    with pytest.raises(RuntimeError):
        tree.write_attr(pf_dir / "enable", 0, 0o644)
    assert (pf_dir / "enable").read_text() == "1\n"
