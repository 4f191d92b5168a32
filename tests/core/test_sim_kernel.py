"""The simulated kernel's reactions (the behaviours the real-kernel suite checks on Linux)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.conftest import sim_host
from vgpukit import pci
from vgpukit.errors import Busy, Conflict, InvalidInput, NoCapacity, NotFound
from vgpukit.sim.holders import hold, release

PF = "0000:05:00.0"


def test_vfs_appear_with_links_and_autoprobe(sim_dir: Path) -> None:
    h = sim_host(sim_dir)
    h.write(h.pci_device(PF, "sriov_numvfs"), "3\n")
    pf = pci.read_device(h, PF)
    assert pf.sriov and pf.sriov.num_vfs == 3
    assert pf.sriov.vfs == ("0000:05:00.2", "0000:05:00.3", "0000:05:00.4")
    vf = pci.read_device(h, "0000:05:00.3")
    assert vf.physfn == PF and vf.driver == "mlx5_core" and vf.ids == "15b3:101c"
    assert vf.numa_node == 0 and vf.parents == pf.parents
    groups = {pci.read_device(h, v).iommu_group for v in pf.sriov.vfs}
    assert len(groups) == 3 and pf.iommu_group not in groups


def test_numvfs_errors(sim_dir: Path) -> None:
    h = sim_host(sim_dir)
    attr = h.pci_device(PF, "sriov_numvfs")
    h.write(attr, "3")
    h.write(attr, "3")  # same count: success, nothing changes
    with pytest.raises(Busy):
        h.write(attr, "2")
    with pytest.raises(InvalidInput) as ei:
        h.write(attr, "17")
    assert ei.value.errno == 34  # ERANGE
    with pytest.raises(InvalidInput):
        h.write(attr, "two")
    h.write(attr, "0")
    assert pci.read_device(h, PF).sriov.vfs == ()  # type: ignore[union-attr]
    assert not h.exists(h.pci_device("0000:05:00.2"))


def test_numvfs_without_driver_is_enoent(sim_dir: Path) -> None:
    h = sim_host(sim_dir)
    h.write(h.pci_driver("mlx5_core", "unbind"), PF)
    with pytest.raises(NotFound) as ei:
        h.write(h.pci_device(PF, "sriov_numvfs"), "2")
    assert ei.value.errno == 2


def test_autoprobe_off_leaves_vfs_unbound(sim_dir: Path) -> None:
    h = sim_host(sim_dir)
    h.write(h.pci_device(PF, "sriov_drivers_autoprobe"), "0")
    h.write(h.pci_device(PF, "sriov_numvfs"), "2")
    assert pci.read_device(h, "0000:05:00.2").driver is None
    h.write(h.sys("bus", "pci", "drivers_probe"), "0000:05:00.2")
    assert pci.read_device(h, "0000:05:00.2").driver == "mlx5_core"


def test_override_alone_does_not_move_a_bound_device(sim_dir: Path) -> None:
    h = sim_host(sim_dir)
    h.write(h.pci_device(PF, "sriov_numvfs"), "1")
    vf = "0000:05:00.2"
    h.write(h.pci_device(vf, "driver_override"), "vfio-pci")
    h.write(h.sys("bus", "pci", "drivers_probe"), vf)
    assert pci.read_device(h, vf).driver == "mlx5_core"
    h.write(h.pci_driver("mlx5_core", "unbind"), vf)
    h.write(h.sys("bus", "pci", "drivers_probe"), vf)
    dev = pci.read_device(h, vf)
    assert dev.driver == "vfio-pci" and dev.driver_override == "vfio-pci"
    assert h.exists(h.dev("vfio", str(dev.iommu_group)))
    h.write(h.pci_device(vf, "driver_override"), "\n")
    h.write(h.pci_driver("vfio-pci", "unbind"), vf)
    assert not h.exists(h.dev("vfio", str(dev.iommu_group)))
    h.write(h.sys("bus", "pci", "drivers_probe"), vf)
    assert pci.read_device(h, vf).driver == "mlx5_core"


def test_bind_errors(sim_dir: Path) -> None:
    h = sim_host(sim_dir)
    with pytest.raises(Busy):
        h.write(h.pci_driver("mlx5_core", "bind"), PF)  # already bound
    with pytest.raises(NotFound):
        h.write(h.pci_driver("mlx5_core", "unbind"), "0000:03:00.0")  # bound to nvidia, not mlx5
    with pytest.raises(NotFound):
        h.write(h.sys("bus", "pci", "drivers_probe"), "0000:ff:00.0")


def test_new_id_binds_matching_unbound_devices(sim_dir: Path) -> None:
    h = sim_host(sim_dir)
    gpu = "0000:03:00.0"
    h.write(h.pci_driver("nvidia", "unbind"), gpu)
    h.write(h.pci_driver("vfio-pci", "new_id"), "10de 20b0")
    assert pci.read_device(h, gpu).driver == "vfio-pci"
    with pytest.raises(Conflict):
        h.write(h.pci_driver("vfio-pci", "new_id"), "10de 20b0")


def test_mdev_shared_capacity_eexist_enospc(qemu_sim: Path) -> None:
    h = sim_host(qemu_sim)
    types = h.sys("class", "mdev_bus", "mtty", "mdev_supported_types")
    avail = lambda t: h.read_int(types / t / "available_instances")  # noqa: E731
    assert (avail("mtty-1"), avail("mtty-2")) == (24, 12)
    u = str(uuid.uuid4())
    h.write(types / "mtty-2" / "create", u + "\n")
    assert (avail("mtty-1"), avail("mtty-2")) == (22, 11)
    inst = h.sys("bus", "mdev", "devices", u)
    assert h.link_name(inst / "mdev_type") == "mtty-2"
    with pytest.raises(Conflict) as ei:
        h.write(types / "mtty-1" / "create", u)
    assert ei.value.errno == 17
    with pytest.raises(InvalidInput):
        h.write(types / "mtty-1" / "create", "not-a-uuid")
    for _ in range(11):
        h.write(types / "mtty-2" / "create", str(uuid.uuid4()))
    assert (avail("mtty-1"), avail("mtty-2")) == (0, 0)
    with pytest.raises(NoCapacity):
        h.write(types / "mtty-1" / "create", str(uuid.uuid4()))
    h.write(inst / "remove", "1")
    assert not h.exists(inst)
    assert (avail("mtty-1"), avail("mtty-2")) == (2, 1)


def test_mdev_remove_refused_while_held(qemu_sim: Path) -> None:
    h = sim_host(qemu_sim)
    types = h.sys("class", "mdev_bus", "mtty", "mdev_supported_types")
    u = str(uuid.uuid4())
    h.write(types / "mtty-1" / "create", u)
    group = h.link_name(h.sys("bus", "mdev", "devices", u, "iommu_group"))
    assert group is not None and h.exists(h.dev("vfio", group))
    pid = hold(qemu_sim, group)
    with pytest.raises(Busy):
        h.write(h.sys("bus", "mdev", "devices", u, "remove"), "1")
    release(qemu_sim, pid)
    h.write(h.sys("bus", "mdev", "devices", u, "remove"), "1")


def test_readonly_attribute_refused(sim_dir: Path) -> None:
    h = sim_host(sim_dir)
    with pytest.raises(Exception, match="EACCES"):
        h.write(h.pci_device(PF, "sriov_totalvfs"), "4")


def test_mdev_counts_missing_from_an_older_state_are_taken_from_the_tree(qemu_sim: Path) -> None:
    import json

    h = sim_host(qemu_sim)
    types = h.sys("class", "mdev_bus", "mtty", "mdev_supported_types")
    for t in ("mtty-2", "mtty-2", "mtty-1"):
        h.write(types / t / "create", str(uuid.uuid4()))
    state_file = qemu_sim / ".vgpukit-sim" / "kernel.json"
    state = json.loads(state_file.read_text())
    del state["mdev_pools"]["mtty"]["counts"]  # as a simulator without per-type counts saved it
    state_file.write_text(json.dumps(state))
    h.write(types / "mtty-1" / "create", str(uuid.uuid4()))
    avail = {t: h.read_int(types / t / "available_instances") for t in ("mtty-1", "mtty-2")}
    assert avail == {"mtty-1": 18, "mtty-2": 9}  # 24 ports - 2x2 - 2x1
