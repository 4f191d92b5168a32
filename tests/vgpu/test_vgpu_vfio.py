"""vGPU over vendor-specific VFIO (h100-vgpu): creatable list shrinks, type id written per VF."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Run, as_json, sim_host
from vgpukit.errors import Busy, InvalidInput, NoCapacity
from vgpukit.sim.holders import hold, release
from vgpukit.vgpu.hostview import parse_creatable

PF = "0000:41:00.0"
VF0, VF1 = "0000:41:00.4", "0000:41:00.5"
MAX = {
    "H100-4C": 20,
    "H100-5C": 16,
    "H100-8C": 10,
    "H100-10C": 8,
    "H100-16C": 5,
    "H100-20C": 4,
    "H100-40C": 2,
    "H100-80C": 1,
}


def _creatable(sim: Path, vf: str = "0000:41:03.7") -> list[str]:
    text = (sim / "sys/bus/pci/devices" / vf / "nvidia/creatable_vgpu_types").read_text()
    return [name for _, name in parse_creatable(text)]


def test_vfs_carry_the_nvidia_interface(h100_sim: Path, run_cli: Run) -> None:
    doc = as_json(run_cli(h100_sim, "vgpu", "types", "--json"))
    (g,) = doc["gpus"]
    assert (g["gpu"], g["interface"], g["vfs"]) == (PF, "vfio", 32)
    names = {t["short"]: t for t in g["types"]}
    assert set(names) == set(MAX)
    assert all(t["creatable"] and t["free_vfs"] == 32 and t["available"] is None for t in names.values())
    assert names["H100-4C"]["type_id"] == "1050" and names["H100-4C"]["max_instances"] == 20
    text = (h100_sim / "sys/bus/pci/devices" / VF0 / "nvidia/creatable_vgpu_types").read_text()
    assert text.splitlines()[0] == "ID    : vGPU Name" and "1050  : NVIDIA H100-4C" in text


@pytest.mark.parametrize("short", ["H100-4C", "H100-10C", "H100-20C", "H100-40C", "H100-80C"])
def test_card_fills_to_the_type_maximum(h100_sim: Path, run_cli: Run, short: str) -> None:
    n = MAX[short]
    r = run_cli(h100_sim, "vgpu", "create", "gpu0", "--type", f"NVIDIA {short}", "--count", str(n), "--json")
    assert r.exit_code == 0, r.stderr
    assert len(as_json(r)["vgpus"]) == n
    assert _creatable(h100_sim) == []  # full: only the header line is left
    r = run_cli(h100_sim, "vgpu", "create", "gpu0", "--type", short)
    assert r.exit_code == 4 and "creatable" in r.stderr


def test_list_shrinks_and_stays_homogeneous(h100_sim: Path, run_cli: Run) -> None:
    assert run_cli(h100_sim, "vgpu", "create", "gpu0", "--type", "h100-20c").exit_code == 0
    assert _creatable(h100_sim) == ["NVIDIA H100-20C"]
    r = run_cli(h100_sim, "vgpu", "create", "gpu0", "--type", "H100-4C")
    assert r.exit_code == 4
    t = {x["short"]: x for x in as_json(run_cli(h100_sim, "vgpu", "types", "--json"))["gpus"][0]["types"]}
    assert t["H100-20C"]["creatable"] and not t["H100-4C"]["creatable"] and t["H100-20C"]["free_vfs"] == 31


def test_count_beyond_capacity_rolls_back(h100_sim: Path, run_cli: Run) -> None:
    """Capacity is only known from the host's list: a 5th 20C fails and the 4 made are undone."""
    r = run_cli(h100_sim, "vgpu", "create", "gpu0", "--type", "H100-20C", "--count", "5")
    assert r.exit_code == 4 and "rolled back the 4" in r.stderr
    assert as_json(run_cli(h100_sim, "vgpu", "list", "--json"))["vgpus"] == []
    assert len(_creatable(h100_sim)) == 8


def test_list_remove_and_in_use(h100_sim: Path, run_cli: Run) -> None:
    r = run_cli(h100_sim, "vgpu", "create", "gpu0", "--type", "H100-40C", "--count", "2", "--json")
    assert [v["id"] for v in as_json(r)["vgpus"]] == [VF0, VF1]
    h = sim_host(h100_sim)
    assert h.read(h.pci_device(VF0, "nvidia", "current_vgpu_type")) == "1056"
    assert h.exists(h.pci_device(VF0, "nvidia", "vgpu_params"))
    lst = as_json(run_cli(h100_sim, "vgpu", "list", "--json"))["vgpus"]
    assert [(v["id"], v["interface"], v["type_id"], v["name"], v["vf"]) for v in lst] == [
        (VF0, "vfio", "1056", "NVIDIA H100-40C", VF0),
        (VF1, "vfio", "1056", "NVIDIA H100-40C", VF1),
    ]
    group = h.link_name(h.pci_device(VF1, "iommu_group"))
    assert group is not None
    pid = hold(h100_sim, group, owner="guest=train7")
    r = run_cli(h100_sim, "vgpu", "remove", VF0, VF1)
    assert r.exit_code == 4 and "train7" in r.stderr
    assert h.read(h.pci_device(VF0, "nvidia", "current_vgpu_type")) == "1056"  # nothing removed
    with pytest.raises(Busy):  # the (simulated) driver refuses too
        h.write(h.pci_device(VF1, "nvidia", "current_vgpu_type"), "0")
    release(h100_sim, pid)
    r = run_cli(h100_sim, "vgpu", "remove", VF0, "41:00.5", "--json")
    assert r.exit_code == 0 and as_json(r)["changed"]
    assert as_json(run_cli(h100_sim, "vgpu", "list", "--json"))["vgpus"] == []
    assert not h.exists(h.pci_device(VF0, "nvidia", "vgpu_params"))
    assert run_cli(h100_sim, "vgpu", "remove", VF0).exit_code == 3
    assert len(_creatable(h100_sim)) == 8


def test_driver_errors(h100_sim: Path) -> None:
    h = sim_host(h100_sim)
    attr = h.pci_device(VF0, "nvidia", "current_vgpu_type")
    with pytest.raises(InvalidInput):
        h.write(attr, "999")  # no such type
    h.write(attr, "1057")  # 80C: the whole card
    with pytest.raises(NoCapacity):
        h.write(h.pci_device(VF1, "nvidia", "current_vgpu_type"), "1057")
    with pytest.raises(Busy):
        h.write(attr, "1056")  # a VF holds one vGPU; clear it first
    with pytest.raises(Busy):
        h.write(h.pci_device(PF, "sriov_numvfs"), "0")  # VFs cannot go while vGPUs exist
    h.write(attr, "0")
    h.write(h.pci_device(PF, "sriov_numvfs"), "0")
    assert not h.exists(h.pci_device(VF0))


def test_vfs_reenabled_get_nvidia_dirs_again(h100_sim: Path, run_cli: Run) -> None:
    h = sim_host(h100_sim)
    h.write(h.pci_device(PF, "sriov_numvfs"), "0")
    r = run_cli(h100_sim, "vgpu", "types", "gpu0", "--json")
    assert as_json(r)["gpus"][0]["interface"] is None
    assert run_cli(h100_sim, "vgpu", "create", "gpu0", "--type", "H100-4C").exit_code == 5
    h.write(h.pci_device(PF, "sriov_numvfs"), "4")
    assert as_json(run_cli(h100_sim, "vgpu", "types", "gpu0", "--json"))["gpus"][0]["vfs"] == 4
    assert run_cli(h100_sim, "vgpu", "create", "gpu0", "--type", "H100-4C", "--count", "4").exit_code == 0
    r = run_cli(h100_sim, "vgpu", "create", "gpu0", "--type", "H100-4C")
    assert r.exit_code == 4 and "free VFs" in r.stderr


def test_dry_run(h100_sim: Path, run_cli: Run) -> None:
    r = run_cli(h100_sim, "vgpu", "create", "gpu0", "--type", "H100-8C", "--count", "3", "--dry-run", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and doc["dry_run"] and len(doc["plan"]) == 3
    assert as_json(run_cli(h100_sim, "vgpu", "list", "--json"))["vgpus"] == []


def test_parse_creatable_layouts() -> None:
    text = "ID    : vGPU Name\n  1050 : NVIDIA H100-4C\n1414  : NVIDIA H200X-1-18C\n\n"
    assert parse_creatable(text) == [(1050, "NVIDIA H100-4C"), (1414, "NVIDIA H200X-1-18C")]
    assert parse_creatable("ID    : vGPU Name\n") == [] and parse_creatable(None) == []
