"""What an operator can see of the KubeVirt mode before a VM runs (trial 2, items 7-10): a PF with VFs
enabled is not offered (and ``bind`` warns), NVIDIA naming without pci.ids warns, ``k8s resources``
shows the health the plugin lists, and ``k8s allocate`` shows the plugin's own Allocate answer."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import invoke, make_sim
from tests.core.test_json_schemas import validator
from tests.k8s.test_kubevirt import GPU_RES, VF_RES, Running, hgx

NIC1 = "0000:25:00.0"


def _json(sim: Path, *args: str, code: int = 0) -> dict:  # type: ignore[type-arg]
    r = invoke(sim, *args, "--json")
    assert r.exit_code == code, r.output
    doc = json.loads(r.stdout)
    kind = doc["schema"].removeprefix("vgpukit.").removesuffix("/v1")
    assert not sorted(validator(kind).iter_errors(doc), key=str)
    return doc  # type: ignore[no-any-return]


def test_a_pf_with_vfs_enabled_is_not_offered_and_bind_warns(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci").exit_code == 0
    r = invoke(sim, "bind", "nic1", "--driver", "vfio-pci")
    assert r.exit_code == 0 and f"warning: {NIC1} is a PF with 2 VFs enabled" in r.stderr, r.output
    doc = _json(sim, "k8s", "resources", "--kubevirt")
    offered = {d["id"] for devs in doc["resources"].values() for d in devs}
    assert NIC1 not in offered and {"0000:25:00.2", "0000:25:00.3"} <= offered
    assert any(w.startswith(f"{NIC1} is a PF with 2 VFs enabled") for w in doc["warnings"])
    assert f"warning: {NIC1} is a PF with 2 VFs enabled" in invoke(sim, "k8s", "resources", "--kubevirt").stderr
    assert invoke(sim, "sriov", "disable", "nic1").exit_code == 0  # the PF alone: offered, no warning
    doc = _json(sim, "k8s", "resources", "--kubevirt")
    assert NIC1 in {d["id"] for devs in doc["resources"].values() for d in devs} and not doc["warnings"]


def test_nvidia_naming_without_pci_ids_warns(short_tmp: Path) -> None:
    sim = hgx(short_tmp / "h")
    doc = _json(sim, "k8s", "resources", "--kubevirt", "--kubevirt-naming", "nvidia")
    assert "nvidia.com/20b0" in doc["resources"]
    (w,) = [w for w in doc["warnings"] if "20b0" in w]  # one per device id, not per GPU
    assert w.startswith("10de:20b0 offered as nvidia.com/20b0 (no pci.ids on this host)")
    db = sim / "usr/share/misc/pci.ids"
    db.parent.mkdir(parents=True)
    db.write_text("# pci.ids\n10de  NVIDIA Corporation\n\t20b0  GA100 [A100 SXM4 40GB]\n")
    doc = _json(sim, "k8s", "resources", "--kubevirt", "--kubevirt-naming", "nvidia")
    assert "nvidia.com/GA100_A100_SXM4_40GB" in doc["resources"] and not doc["warnings"]


def test_resources_show_the_health_the_plugin_lists(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "t4", "t4-mdev")
    assert invoke(sim, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--count", "2").exit_code == 0
    res = "vgpukit.io/vm-vgpu-t4-4q"
    doc = _json(sim, "k8s", "resources", "--kubevirt")
    assert {d["health"] for d in doc["resources"][res]} == {"Healthy"}
    assert invoke(sim, "sim", "fault", "lost", "gpu0").exit_code == 0
    doc = _json(sim, "k8s", "resources", "--kubevirt", code=6)  # offered Unhealthy by the health rule: exit 6
    assert [(d["health"], d["why"]) for d in doc["resources"][res]] == [
        ("Unhealthy", "the GPU stopped answering (NVML: GPU is lost)")
    ] * 2
    assert "Unhealthy: the GPU stopped answering" in invoke(sim, "k8s", "resources", "--kubevirt").stdout
    doc = _json(sim, "k8s", "resources", code=6)  # containers: the lost GPU is not read, its vGPUs Unhealthy
    assert {d["health"] for d in doc["resources"]["vgpukit.io/vgpu-t4-4q"]} == {"Unhealthy"}


def test_allocate_shows_the_answer_the_running_plugin_gives(short_tmp: Path) -> None:
    sim = hgx(short_tmp / "h")
    r = Running(sim)
    try:
        assert r.kubelet.wait(lambda: len(r.devices(VF_RES)) == 3)
        chosen, resp = r.kubelet.allocate(VF_RES, 2)
    finally:
        r.close()
    doc = _json(sim, "k8s", "allocate", "--kubevirt", *chosen)
    (answer,) = doc["answers"]
    assert (answer["resource"], answer["devices"], doc["warnings"]) == (VF_RES, chosen, [])
    assert answer["response"]["envs"] == dict(resp.envs)
    assert [d["host_path"] for d in answer["response"]["devices"]] == [d.host_path for d in resp.devices]
    out = invoke(sim, "k8s", "allocate", "--kubevirt", chosen[0], "0000:23:00.0").stdout
    assert f"  env     PCI_RESOURCE_VGPUKIT_IO_VM-PCI-15B3-101C={chosen[0]}\n" in out
    assert f"{GPU_RES}: 0000:23:00.0\n" in out and "  device  /dev/vfio/vfio (rw)\n" in out
    r2 = invoke(sim, "k8s", "allocate", "--kubevirt", "0000:05:00.0")  # the PF, on mlx5_core: not offered
    assert r2.exit_code == 3 and "no device 0000:05:00.0 offered to the KubeVirt mode here" in r2.stderr
    doc = _json(sim, "k8s", "allocate", chosen[0])  # containers: the CDI name and the device nodes
    assert doc["answers"][0]["response"]["cdi_devices"] == [{"name": f"vgpukit.io/vf={chosen[0]}"}]
    assert invoke(sim, "sim", "fault", "aer", chosen[0], "fatal").exit_code == 0
    doc = _json(sim, "k8s", "allocate", "--kubevirt", chosen[0])
    assert doc["warnings"] and doc["warnings"][0].startswith(f"{chosen[0]} is Unhealthy (")


def test_share_replicas_is_refused_with_kubevirt(tmp_path: Path) -> None:
    """Trial 2: --share-replicas (containers' gpu-share) was silently accepted with --kubevirt."""
    sim = make_sim(tmp_path / "h")
    for cmd in (["k8s", "resources"], ["k8s", "device-plugin"], ["k8s", "allocate", "x"]):
        r = invoke(sim, *cmd, "--kubevirt", "--share-replicas", "2")
        assert r.exit_code == 2 and "--share-replicas is for containers' gpu-share" in r.stderr, r.output
    assert invoke(sim, "k8s", "resources", "--share-replicas", "2").exit_code == 0
