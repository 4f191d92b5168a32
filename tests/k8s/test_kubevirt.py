"""The device plugin's KubeVirt mode on simulated hosts: what KubeVirt's virt-launcher reads out of the
Allocate answer (through the stand-in, tests/k8s/virtlauncher.py), naming, IOMMU groups, iommufd nodes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim, sim_host
from tests.k8s import virtlauncher
from tests.k8s.kubelet import Kubelet
from vgpukit.clikit.context import App
from vgpukit.k8s import kubevirt
from vgpukit.k8s.plugin import Manager, plugin_dir
from vgpukit.stopping import Stop
from vgpukit.wiring import Wiring

VF_RES = "vgpukit.io/vm-pci-15b3-101c"
GPU_RES = "vgpukit.io/vm-pci-10de-20b0"


def _ok(sim: Path, *args: str) -> None:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr


def hgx(path: Path) -> Path:
    """hgx-a100 with 3 VFs of nic0 on vfio-pci and gpu2, gpu4 (NUMA 0 and 1) on vfio-pci."""
    sim = make_sim(path)
    _ok(sim, "sriov", "enable", "nic0", "--vfs", "3", "--driver", "vfio-pci")
    for gpu in ("gpu2", "gpu3", "gpu4"):
        _ok(sim, "bind", gpu, "--driver", "vfio-pci")
    return sim


class Running:
    def __init__(self, sim: Path, naming: str = "vgpukit") -> None:
        self.sim, self.host = sim, sim_host(sim)
        self.kubelet = Kubelet(plugin_dir(self.host)).start()

        def open_host() -> tuple[object, object, object]:
            app = App(sim_dir=sim, wiring=Wiring())
            return app.host, None, app.close

        self.manager = Manager(self.host, kubevirt.Poller(open_host, naming), "devices")  # type: ignore[arg-type]
        self.stop = Stop()
        self.thread = threading.Thread(target=self.manager.run, args=(self.stop, 0.05), daemon=True)
        self.thread.start()

    def devices(self, resource: str) -> dict[str, str]:
        ep = self.kubelet.endpoints.get(resource)
        return dict(ep.devices) if ep else {}

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.kubelet.stop()


def test_allocate_gives_virt_launcher_the_addresses_and_the_vfio_nodes(short_tmp: Path) -> None:
    r = Running(hgx(short_tmp / "h"))
    try:
        k = r.kubelet
        assert k.wait(lambda: len(r.devices(VF_RES)) == 3 and len(r.devices(GPU_RES)) == 3)
        chosen, resp = k.allocate(VF_RES, 2)
        assert not resp.cdi_devices  # nothing for a container runtime: the pod is virt-launcher's
        assert dict(resp.envs) == {"PCI_RESOURCE_VGPUKIT_IO_VM-PCI-15B3-101C": ",".join(chosen)}
        groups = {os.path.basename(os.readlink(r.sim / f"sys/bus/pci/devices/{b}/iommu_group")) for b in chosen}
        assert {d.host_path for d in resp.devices} == {"/dev/vfio/vfio", *(f"/dev/vfio/{g}" for g in groups)}
        _c, gpu = k.allocate(GPU_RES, 1)
        vmi = {
            "spec": {
                "domain": {
                    "devices": {
                        "gpus": [{"name": "gpu1", "deviceName": GPU_RES}],
                        "hostDevices": [{"name": f"nic{i}", "deviceName": VF_RES} for i in range(2)],
                    }
                }
            }
        }
        made = virtlauncher.from_env(vmi, {**resp.envs, **gpu.envs})
        addresses = [el.find("source/address").attrib for el in made]  # type: ignore[union-attr]
        assert [f"{a['domain'][2:]}:{a['bus'][2:]}:{a['slot'][2:]}.{a['function'][2:]}" for a in addresses] == [
            *gpu.envs.values(),
            *chosen,
        ]
        assert all(el.get("managed") == "no" for el in made)
        vmi["spec"]["domain"]["devices"]["hostDevices"].append({"name": "nic2", "deviceName": VF_RES})
        with pytest.raises(virtlauncher.LaunchError, match="do not match"):  # 3 asked, 2 allocated
            virtlauncher.from_env(vmi, {**resp.envs, **gpu.envs})
    finally:
        r.close()


def test_preferred_allocation_keeps_gpus_on_one_numa_node(short_tmp: Path) -> None:
    r = Running(hgx(short_tmp / "h"))
    try:
        k = r.kubelet
        assert k.wait(lambda: len(r.devices(GPU_RES)) == 3)
        assert k.endpoints[GPU_RES].numa["0000:83:00.0"] == [1]
        chosen, _resp = k.allocate(GPU_RES, 2)
        assert sorted(chosen) == ["0000:23:00.0", "0000:24:00.0"]  # gpu2 and gpu3 share a switch, gpu4 is on NUMA 1
    finally:
        r.close()


def test_mdevs_and_vgpus_are_answered_with_their_uuids(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "t4", "t4-mdev")
    _ok(sim, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--count", "2")
    offers = kubevirt.collect(sim_host(sim))
    (name,) = offers.resources
    assert name == "vgpukit.io/vm-vgpu-t4-4q" and offers.resources[name].selector == "GRID T4-4Q"
    nvidia = kubevirt.collect(sim_host(sim), "nvidia")
    assert list(nvidia.resources) == ["nvidia.com/GRID_T4-4Q"]  # kubevirt-gpu-device-plugin's name
    dev = nvidia.resources["nvidia.com/GRID_T4-4Q"].devices[0]
    assert dev.env == (f"MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-4Q={dev.id}",)
    vmi = {"spec": {"domain": {"devices": {"gpus": [{"name": "g", "deviceName": "nvidia.com/GRID_T4-4Q"}]}}}}
    (el,) = virtlauncher.from_env(vmi, dict(e.split("=", 1) for e in dev.env))
    assert (el.get("type"), el.get("display"), el.find("source/address").get("uuid")) == ("mdev", "on", dev.id)  # type: ignore[union-attr]


def test_nvidia_naming_uses_the_pci_ids_name_or_the_device_id(short_tmp: Path) -> None:
    sim = hgx(short_tmp / "h")
    assert "nvidia.com/20b0" in kubevirt.collect(sim_host(sim), "nvidia").resources  # no database: the id
    db = sim / "usr/share/misc/pci.ids"
    db.parent.mkdir(parents=True)
    db.write_text(
        "# pci.ids\n10de  NVIDIA Corporation\n\t20b0  GA100 [A100 SXM4 40GB]\n\t20b2  GA100 [A100 SXM4 80GB]\n"
    )
    offers = kubevirt.collect(sim_host(sim), "nvidia")
    assert "nvidia.com/GA100_A100_SXM4_40GB" in offers.resources
    assert VF_RES in offers.resources  # not NVIDIA's: vgpukit's name
    env = offers.resources["nvidia.com/GA100_A100_SXM4_40GB"].devices[0].env[0]
    assert env.startswith("PCI_RESOURCE_NVIDIA_COM_GA100_A100_SXM4_40GB=")


def test_iommufd_nodes_join_where_the_kernel_offers_them(short_tmp: Path) -> None:
    sim = hgx(short_tmp / "h")
    vf = "0000:05:00.2"
    (sim / "dev/iommu").write_text("")
    (sim / f"sys/bus/pci/devices/{vf}/vfio-dev/vfio7").mkdir(parents=True)
    offers = kubevirt.collect(sim_host(sim))
    dev = next(d for d in offers.resources[VF_RES].devices if d.id == vf)
    group = os.path.basename(os.readlink(sim / f"sys/bus/pci/devices/{vf}/iommu_group"))
    assert dev.nodes == ("/dev/vfio/vfio", f"/dev/vfio/{group}", "/dev/iommu", "/dev/vfio/devices/vfio7")
    assert "/dev/vfio/devices/vfio7" in dev.watch


def test_a_group_with_a_member_on_a_host_driver_is_not_offered(short_tmp: Path) -> None:
    sim = hgx(short_tmp / "h")
    gpu, nic = "0000:23:00.0", "0000:05:00.0"  # put the PF nic0 (on mlx5_core) into gpu2's group
    group = os.readlink(sim / f"sys/bus/pci/devices/{gpu}/iommu_group")
    link = sim / f"sys/bus/pci/devices/{nic}/iommu_group"
    members = sim / "sys/kernel/iommu_groups" / os.path.basename(group) / "devices"
    link.unlink()
    link.symlink_to(group)
    (members / nic).symlink_to(f"../../../../bus/pci/devices/{nic}")
    offers = kubevirt.collect(sim_host(sim))
    assert gpu not in {d.id for d in offers.resources[GPU_RES].devices}
    assert any(w.startswith(f"{gpu}: IOMMU group") and f"{nic} (mlx5_core)" in w for w in offers.warnings)


def test_cli_modes_and_refusals(short_tmp: Path) -> None:
    sim = hgx(short_tmp / "h")
    r = invoke(sim, "k8s", "resources", "--kubevirt", "--json")
    assert r.exit_code == 0, r.stderr
    import json

    assert set(json.loads(r.stdout)["resources"]) == {VF_RES, GPU_RES}
    r = invoke(sim, "k8s", "resources", "--kubevirt", "--kubevirt-naming", "nvidia", "--json")
    assert "nvidia.com/20b0" in json.loads(r.stdout)["resources"]
    assert invoke(sim, "k8s", "resources", "--kubevirt-naming", "nvidia").exit_code == 2
    r = invoke(sim, "k8s", "device-plugin", "--kubevirt", "--allocate", "cdi")
    assert r.exit_code == 2 and "not --allocate cdi" in r.stderr


def test_a_sick_gpu_makes_its_vgpus_unhealthy(short_tmp: Path) -> None:
    sim = make_sim(short_tmp / "t4", "t4-mdev")
    _ok(sim, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--count", "2")
    gpu = kubevirt.collect(sim_host(sim)).resources["vgpukit.io/vm-vgpu-t4-4q"].devices[0].topo_bdf
    sick: dict[str, str] = {}
    host = sim_host(sim)
    kubelet = Kubelet(plugin_dir(host)).start()

    def open_host() -> tuple[object, object, object]:
        app = App(sim_dir=sim, wiring=Wiring())
        return app.host, None, app.close

    manager = Manager(host, kubevirt.Poller(open_host, "vgpukit"), "devices", health=lambda: dict(sick))  # type: ignore[arg-type]
    stop = Stop()
    thread = threading.Thread(target=manager.run, args=(stop, 0.05), daemon=True)
    thread.start()
    try:
        res = "vgpukit.io/vm-vgpu-t4-4q"
        assert kubelet.wait(
            lambda: res in kubelet.endpoints and set(kubelet.endpoints[res].devices.values()) == {"Healthy"}
        )
        sick[gpu] = "XID 79: fell off the bus"
        assert kubelet.wait(lambda: set(kubelet.endpoints[res].devices.values()) == {"Unhealthy"})
        assert len(kubelet.endpoints[res].devices) == 2
    finally:
        stop.set()
        thread.join(10)
        kubelet.stop()


def test_the_command_listens_in_the_kubevirt_mode(short_tmp: Path) -> None:
    """``--kubevirt`` takes its devices from the watch's model too (no timer: ``--interval`` an hour):
    VFs another command creates reach ListAndWatch under the KubeVirt mode's resource names."""
    import signal
    import subprocess
    import sys

    sim = hgx(short_tmp / "h")
    kubelet = Kubelet(plugin_dir(sim_host(sim))).start()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "k8s", "device-plugin", "--kubevirt"]
    cmd += ["--interval", "3600"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def vfs() -> int:
        ep = kubelet.endpoints.get(VF_RES)
        return len(ep.updates[-1][1]) if ep is not None and ep.updates else 0

    try:
        assert kubelet.wait(lambda: vfs() == 3, timeout=30)
        _ok(sim, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci")
        assert kubelet.wait(lambda: vfs() == 5, timeout=10)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        kubelet.stop()
    assert proc.returncode == 0, err
    assert "listening to kernel uevents" in out + err


def test_a_refused_device_plugin_starts_nothing_and_makes_nothing(short_tmp: Path) -> None:
    """A refusal (exit 2) comes before the plugin directory is made or the watch starts: no listening
    thread is left behind (CI, 2026-11-29: one outlived its test and failed when the host was removed)."""
    sim = hgx(short_tmp / "h")
    before = {t.ident for t in threading.enumerate()}
    r = invoke(sim, "k8s", "device-plugin", "--kubevirt", "--allocate", "cdi")
    assert r.exit_code == 2
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert left == []
    assert not sim_host(sim).exists(plugin_dir(sim_host(sim)))
