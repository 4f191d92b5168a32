"""The health rule through the doors that make pieces or hand devices out (trial 2, High 2): ``vgpu
create``, ``mdev create`` (and the mdevctl shim), ``bind --driver`` and ``k8s resources --kubevirt`` on a
device the health layer finds unusable (a lost GPU; a PF with a fatal AER error, and its VFs) refuse it
as every door does (exit 6, error kind ``unusable``, the reason, the host unchanged), through the one
predicate (vgpukit/exclusion.py). ``bind --restore`` (taking a device back) stays allowed.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import invoke, make_sim
from tests.doors import harness

LOST = "the GPU stopped answering (NVML: GPU is lost)"


def fault(sim: Path, *args: str) -> None:
    r = invoke(sim, "sim", "fault", *args)
    assert r.exit_code == 0, r.stderr


def refused_alike(answers: list[harness.Answer], says: str) -> None:
    for answer in answers:
        assert (answer.code, answer.kind) == (6, "unusable"), answer
        assert says in answer.message, answer


def test_an_mdev_or_vgpu_on_a_lost_legacy_gpu(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "t4-mdev")
    fault(sim, "lost", "gpu0")
    says = f"gpu0 (0000:3b:00.0) is unusable: {LOST}"
    mdev = harness.every_door(
        sim,
        tmp_path,
        "mdev:\n  - {parent: 0000:3b:00.0, type: nvidia-232, count: 1}",
        ["mdev", "create", "0000:3b:00.0", "nvidia-232"],
        ["start", "-p", "0000:3b:00.0", "-t", "nvidia-232"],
    )
    refused_alike(mdev, says)
    vgpu = harness.every_door(
        sim, tmp_path, "vgpu:\n  - {device: gpu0, type: T4-4Q, count: 1}", ["vgpu", "create", "gpu0", "--type", "T4-4Q"]
    )
    refused_alike(vgpu, says)
    chosen = harness.area(sim, ["mdev", "create", "--type", "nvidia-232"])  # the planner's choice skips gpu0
    assert chosen.code == 0, chosen
    listed = json.loads(invoke(sim, "mdev", "list", "--json").stdout)
    assert {m["parent"] for m in listed["instances"]} == {"0000:d8:00.0"}, listed


def test_a_vgpu_on_a_lost_sriov_gpu(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "h100-vgpu")
    fault(sim, "lost", "gpu0")
    answers = harness.every_door(
        sim,
        tmp_path,
        "vgpu:\n  - {device: gpu0, type: H100-20C, count: 1}",
        ["vgpu", "create", "gpu0", "--type", "H100-20C"],
    )
    refused_alike(answers, f"gpu0 (0000:41:00.0) is unusable: {LOST}")


def test_bind_of_a_lost_gpu_and_of_a_pf_with_a_fatal_aer_error_and_its_vfs(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    assert invoke(sim, "sriov", "enable", "nic1", "--vfs", "2").exit_code == 0
    fault(sim, "lost", "gpu3")
    fault(sim, "aer", "nic1", "fatal")
    before = harness.host_state(sim)
    gpu = harness.area(sim, ["bind", "gpu3", "--driver", "vfio-pci"])
    pf = harness.area(sim, ["bind", "nic1", "--driver", "vfio-pci"])
    vf = harness.area(sim, ["bind", "0000:25:00.2", "--driver", "vfio-pci"])
    enable = harness.area(sim, ["sriov", "enable", "nic1", "--vfs", "3"])
    assert harness.host_state(sim) == before
    refused_alike([gpu], f"gpu3 (0000:24:00.0) is unusable: {LOST}")
    refused_alike([pf, enable], "nic1 (0000:25:00.0) is unusable: PCIe AER fatal errors counted")
    refused_alike([vf], "0000:25:00.2 is unusable: carved from 0000:25:00.0: PCIe AER fatal errors counted")
    assert vf.line.endswith("(see: vgpukit health 0000:25:00.0)"), vf
    assert harness.area(sim, ["bind", "gpu2", "--driver", "vfio-pci"]).code == 0  # a healthy one is bound


def test_k8s_resources_marks_a_lost_gpu_offered_to_vms(tmp_path: Path) -> None:
    """A GPU lost while on vfio-pci: ``k8s resources --kubevirt`` shows it as the running plugin lists it
    (Unhealthy, why), the others as they are, and exits 6 naming it (on a read-only /run too)."""
    sim = make_sim(tmp_path / "host", "hgx-a100")
    for gpu in ("gpu2", "gpu3"):
        assert invoke(sim, "bind", gpu, "--driver", "vfio-pci").exit_code == 0
    fault(sim, "lost", "gpu3")
    fault(sim, "storage", "/run", "EROFS")  # a read: it writes no health record
    r = invoke(sim, "k8s", "resources", "--kubevirt", "--json")
    assert r.exit_code == 6, r.stderr
    devices = {d["id"]: d for ds in json.loads(r.stdout)["resources"].values() for d in ds}
    assert (devices["0000:24:00.0"]["health"], devices["0000:24:00.0"]["why"]) == ("Unhealthy", LOST)
    assert devices["0000:23:00.0"]["health"] == "Healthy"
    assert r.stderr.startswith(f"vgpukit: error: 0000:24:00.0 is offered Unhealthy: {LOST}"), r.stderr


def test_the_vfs_of_a_pf_with_a_fatal_aer_error_are_offered_unhealthy(tmp_path: Path) -> None:
    """The plugin's health rule (k8s resources shows it) takes a PF's VFs with it, as ``bind`` refuses them."""
    sim = make_sim(tmp_path / "host", "hgx-a100")
    assert invoke(sim, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci").exit_code == 0
    fault(sim, "aer", "nic1", "fatal")
    r = invoke(sim, "k8s", "resources", "--json")
    assert r.exit_code == 6, r.stderr
    vfs = {d["id"]: d for d in json.loads(r.stdout)["resources"]["vgpukit.io/vf-15b3-101b"] if "25:00" in d["id"]}
    why = "carved from 0000:25:00.0: PCIe AER fatal errors counted"
    assert {(d["health"], d["why"]) for d in vfs.values()} == {("Unhealthy", why)} and len(vfs) == 2, vfs
