"""The simulated kernel's own writes stay inside the sim root, whatever symlinks are planted in it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import make_sim, sim_host
from vgpukit.errors import InvalidInput

PF = "0000:05:00.0"


def _plant(link: Path, target: Path) -> None:
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif os.path.lexists(link):
        link.unlink()
    link.symlink_to(target)


def test_attribute_planted_as_link_outside_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "h100-vgpu")
    h = sim_host(sim)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    vf0, vf1 = (h.link_name(h.pci_device("0000:41:00.0", f"virtfn{n}")) or "" for n in (0, 1))
    planted = h.pci_device(vf1, "nvidia", "creatable_vgpu_types")
    _plant(planted, outside)
    # creating a vGPU on VF 0 makes the driver rewrite every VF's creatable list, VF 1's included
    with pytest.raises(InvalidInput, match=r"creatable_vgpu_types.*outside the simulated host"):
        h.write(h.pci_device(vf0, "nvidia", "current_vgpu_type"), "1052")
    assert outside.read_text() == "precious\n"
    assert h.read(h.pci_device(vf0, "nvidia", "current_vgpu_type")).strip() == "0"  # the write was undone
    assert not h.exists(h.pci_device(vf0, "nvidia", "placement_id"))


def test_device_dir_planted_as_link_outside_is_refused(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host")
    h = sim_host(sim)
    h.write(h.pci_device(PF, "sriov_numvfs"), "2")
    vf = "0000:05:00.2"
    # a copy of the VF's directory outside the root, and the bus link pointed at it
    outside = tmp_path / "outside-vf"
    shutil.copytree(os.path.realpath(h.pci_device(vf)), outside, symlinks=True)  # its `driver` link included
    before = sorted(os.listdir(outside))
    _plant(h.pci_device(vf), outside)
    with pytest.raises(InvalidInput, match="outside the simulated host"):
        h.write(h.pci_driver("mlx5_core", "unbind"), vf)
    assert sorted(os.listdir(outside)) == before and (outside / "driver").is_symlink()


def test_new_vf_dir_planted_as_link_outside_is_refused_and_undone(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host")
    h = sim_host(sim)
    pf_dir = Path(os.path.realpath(h.pci_device(PF)))
    groups = sorted(os.listdir(h.sys("kernel", "iommu_groups")))
    outside = tmp_path / "outside-dir"
    outside.mkdir()
    (pf_dir.parent / "0000:05:00.3").symlink_to(outside)  # where the second VF will be created
    with pytest.raises(InvalidInput, match=r"0000:05:00\.3"):
        h.write(h.pci_device(PF, "sriov_numvfs"), "2")
    assert list(outside.iterdir()) == []
    assert h.read(h.pci_device(PF, "sriov_numvfs")).strip() == "0"
    assert not any(n.startswith("virtfn") for n in os.listdir(pf_dir))
    assert not os.path.lexists(h.pci_device("0000:05:00.2"))
    assert sorted(os.listdir(h.sys("kernel", "iommu_groups"))) == groups
