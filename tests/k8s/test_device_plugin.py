"""The device plugin against a kubelet-side peer (tests/k8s/kubelet.py) on simulated hosts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import invoke, make_sim, sim_host
from tests.k8s.kubelet import Kubelet
from vgpukit.clikit.context import App
from vgpukit.k8s.plugin import HEALTHY, UNHEALTHY, Manager, plugin_dir
from vgpukit.node.inventory import Inventory, Options, Poller, collect
from vgpukit.stopping import Stop
from vgpukit.wiring import Wiring

VF_POOL = "vgpukit.io/vf-15b3-101b"
MIG_3G = "vgpukit.io/mig-3g.20gb"


def _ok(sim: Path, *args: str) -> None:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr


def hgx(path: Path) -> Path:
    """hgx-a100 with 4 VFs of nic0 and 2 of nic2 on vfio-pci, gpu0/gpu1 in MIG, and CDI specs written."""
    sim = make_sim(path)
    _ok(sim, "sriov", "enable", "nic0", "--vfs", "4", "--driver", "vfio-pci")
    _ok(sim, "sriov", "enable", "nic2", "--vfs", "2", "--driver", "vfio-pci")
    _ok(sim, "partition", "gpu0", "--mig", "3g.20gb,3g.20gb")
    _ok(sim, "partition", "gpu1", "--mig", "3g.20gb,1g.5gb")
    _ok(sim, "cdi", "generate")
    return sim


def collector(sim: Path, replicas: int = 2) -> Inventory:
    app = App(sim_dir=sim, wiring=Wiring())
    try:
        return collect(app.host, app.nvml, Options(replicas=replicas))
    finally:
        app.close()


def poller(sim: Path, replicas: int = 2) -> Poller:
    """As the CLI builds it: a fresh App per poll, full collect only when the signature changes."""

    def open_host() -> tuple[object, object, object]:
        app = App(sim_dir=sim, wiring=Wiring())
        return app.host, app.nvml, app.close

    return Poller(open_host, lambda _host: Options(replicas=replicas))  # type: ignore[arg-type]


class Running:
    """The plugin manager polling in a thread, and the kubelet peer."""

    def __init__(self, sim: Path) -> None:
        self.sim = sim
        self.host = sim_host(sim)
        self.kubelet = Kubelet(plugin_dir(self.host)).start()
        self.manager = Manager(self.host, poller(sim))
        self.stop = Stop()
        self.thread = threading.Thread(target=self.manager.run, args=(self.stop, 0.05), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.kubelet.stop()


@pytest.fixture
def running(short_tmp: Path) -> Iterator[Running]:
    r = Running(hgx(short_tmp / "h"))
    yield r
    r.close()


def _devices(r: Running, resource: str) -> dict[str, str]:
    ep = r.kubelet.endpoints.get(resource)
    return dict(ep.devices) if ep else {}


def test_registers_each_resource_and_lists_its_devices(running: Running) -> None:
    k = running.kubelet
    want = {VF_POOL, MIG_3G, "vgpukit.io/mig-1g.5gb", "vgpukit.io/gpu-share"}
    assert k.wait(lambda: want <= set(k.endpoints) and all(k.endpoints[r].devices for r in want))
    assert len(_devices(running, VF_POOL)) == 6
    assert len(_devices(running, MIG_3G)) == 3
    assert len(_devices(running, "vgpukit.io/gpu-share")) == 6 * 2  # 6 GPUs not in MIG mode, 2 replicas
    assert set(_devices(running, VF_POOL).values()) == {HEALTHY}
    ep = k.endpoints[VF_POOL]
    assert ep.options.get_preferred_allocation_available
    assert ep.numa["0000:05:00.2"] == [0] and ep.numa["0000:85:00.2"] == [1]  # nic0 socket 0, nic2 socket 1
    sockets = sorted(p.name for p in plugin_dir(running.host).iterdir())
    assert "vgpukit-vf-15b3-101b.sock" in sockets and "vgpukit-mig-3g.20gb.sock" in sockets


def test_allocate_answers_cdi_names_that_cdi_generate_wrote_and_device_specs(running: Running) -> None:
    k = running.kubelet
    assert k.wait(lambda: len(_devices(running, VF_POOL)) == 6 and len(_devices(running, MIG_3G)) == 3)
    chosen, resp = k.allocate(VF_POOL, 2)
    names = [c.name for c in resp.cdi_devices]
    assert names == [f"vgpukit.io/vf={b}" for b in chosen]
    spec = yaml.safe_load((running.sim / "etc/cdi/vgpukit-vf.yaml").read_text())
    written = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    assert set(names) <= written  # the names resolve in the specs on the node
    paths = {d.host_path for d in resp.devices}
    assert "/dev/vfio/vfio" in paths and all(d.permissions == "rw" for d in resp.devices)
    assert len(paths) == 3  # /dev/vfio/vfio once, one group node per VF
    _chosen, mig = k.allocate(MIG_3G, 1)
    assert mig.cdi_devices[0].name.startswith("vgpukit.io/mig=MIG-")
    assert mig.envs["NVIDIA_VISIBLE_DEVICES"] == mig.cdi_devices[0].name.partition("=")[2]
    assert "/dev/nvidiactl" in {d.host_path for d in mig.devices}
    assert k.wait(lambda: len(_devices(running, "vgpukit.io/gpu-share")) == 12)
    _chosen, share = k.allocate("vgpukit.io/gpu-share", 1)  # a replica: the whole GPU's CDI device
    gpu_spec = yaml.safe_load((running.sim / "etc/cdi/vgpukit-gpu.yaml").read_text())
    assert share.cdi_devices[0].name in {f"{gpu_spec['kind']}={d['name']}" for d in gpu_spec["devices"]}
    assert share.cdi_devices[0].name == "vgpukit.io/gpu=" + share.envs["NVIDIA_VISIBLE_DEVICES"]


def test_preferred_allocation_keeps_devices_under_one_switch_and_numa_node(running: Running) -> None:
    k = running.kubelet
    assert k.wait(lambda: len(_devices(running, VF_POOL)) == 6)
    # offered one VF of nic0 (socket 0) and both of nic2 (socket 1): two together means nic2's pair
    chosen, _ = k.allocate(VF_POOL, 2, available=["0000:05:00.3", "0000:85:00.2", "0000:85:00.3"])
    assert sorted(chosen) == ["0000:85:00.2", "0000:85:00.3"]
    # shares of one GPU beat shares of two GPUs, even under one switch
    share = "vgpukit.io/gpu-share"
    avail = ["0000:23:00.0-0", "0000:24:00.0-0", "0000:24:00.0-1"]
    chosen, _ = k.allocate(share, 2, available=avail)
    assert sorted(chosen) == ["0000:24:00.0-0", "0000:24:00.0-1"]


def test_list_and_watch_follows_the_host(running: Running) -> None:
    k = running.kubelet
    assert k.wait(lambda: len(_devices(running, VF_POOL)) == 6)
    r = invoke(running.sim, "sim", "hold", "0000:05:00.2", "--json")  # a VM takes a VF
    assert r.exit_code == 0, r.stderr
    assert k.wait(lambda: _devices(running, VF_POOL).get("0000:05:00.2") == UNHEALTHY)
    assert list(_devices(running, VF_POOL).values()).count(HEALTHY) == 5
    import json

    _ok(running.sim, "sim", "release", str(json.loads(r.stdout)["pid"]))
    assert k.wait(lambda: _devices(running, VF_POOL).get("0000:05:00.2") == HEALTHY)
    _ok(running.sim, "sriov", "disable", "nic2")  # devices disappear
    assert k.wait(lambda: len(_devices(running, VF_POOL)) == 4)
    assert not any(b.startswith("0000:85:") for b in _devices(running, VF_POOL))


def test_allocated_device_held_by_its_container_stays_healthy(running: Running) -> None:
    k = running.kubelet
    assert k.wait(lambda: len(_devices(running, VF_POOL)) == 6)
    chosen, _ = k.allocate(VF_POOL, 1, available=["0000:05:00.4"])
    _ok(running.sim, "sim", "hold", chosen[0])  # the pod's container opens its VFIO group
    _ok(running.sim, "sim", "hold", "0000:05:00.5")  # a VM outside Kubernetes
    assert k.wait(lambda: _devices(running, VF_POOL).get("0000:05:00.5") == UNHEALTHY)
    assert _devices(running, VF_POOL)["0000:05:00.4"] == HEALTHY


def test_reregisters_when_the_kubelet_restarts(running: Running) -> None:
    k = running.kubelet
    assert k.wait(lambda: MIG_3G in k.endpoints and len(_devices(running, MIG_3G)) == 3)
    before = len(k.registrations)
    k.restart()  # kubelet.sock and every plugin socket removed, a new kubelet.sock
    assert k.wait(lambda: MIG_3G in k.endpoints and len(_devices(running, MIG_3G)) == 3)
    assert len(k.registrations) > before
    chosen, resp = k.allocate(MIG_3G, 1)  # the plugin serves on its new socket
    assert resp.cdi_devices[0].name == f"vgpukit.io/mig={chosen[0]}"


def test_unknown_device_in_allocate_is_an_error(running: Running) -> None:
    import grpc

    from vgpukit.k8s.v1beta1 import api_pb2 as api

    k = running.kubelet
    assert k.wait(lambda: VF_POOL in k.endpoints)
    req = api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=["0000:ff:00.0"])])
    with pytest.raises(grpc.RpcError) as err:
        k.endpoints[VF_POOL].stub.Allocate(req, timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_other_profiles_resources(tmp_path: Path) -> None:
    t4 = make_sim(tmp_path / "t4", "t4-mdev")
    _ok(t4, "vgpu", "create", "gpu0", "--type", "T4-4Q")
    inv = collector(t4)
    assert list(inv.resources) == ["vgpukit.io/vgpu-t4-4q"]  # no gpu-share on a vGPU host driver
    (dev,) = inv.resources["vgpukit.io/vgpu-t4-4q"]
    assert dev.cdi_name == f"vgpukit.io/mdev={dev.id}"
    guest = make_sim(tmp_path / "g", "qemu-guest")
    _ok(guest, "mdev", "create", "mtty", "--type", "mtty-2")
    _ok(guest, "sriov", "enable", "nvme0", "--vfs", "2", "--driver", "vfio-pci")
    assert sorted(collector(guest).resources) == ["vgpukit.io/mdev-mtty-2", "vgpukit.io/vf-1b36-0010"]


def test_gpu_share_carries_the_qos_tenants_share_and_memory_cap(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    (sim / "etc/vgpukit").mkdir(parents=True, exist_ok=True)
    (sim / "etc/vgpukit/qos.yaml").write_text(
        "gpus:\n  gpu0:\n    tenants:\n"
        "      train: {class: offline, share: 30, pids: [4242], memory: 4GiB}\n"
        "      serve: {class: online, share: 70, pids: [4343]}\n"
    )
    app = App(sim_dir=sim, wiring=Wiring())
    from vgpukit.qos.config import default_config_path, load_base

    inv = collect(app.host, app.nvml, Options(replicas=2, qos=load_base(app.host, default_config_path(app.host))))
    shares = {d.id: d for d in inv.resources["vgpukit.io/gpu-share"]}
    train = shares["0000:03:00.0-train"]
    assert "VGPUKIT_QOS_TENANT=train" in train.env and "VGPUKIT_QOS_SHARE=30" in train.env
    assert f"VGPUKIT_CUDA_MEMORY={4 << 30}" in train.env
    assert "/run/vgpukit/cuda/train" in {m.host_path for m in train.mounts}
    assert not any(e.startswith("VGPUKIT_CUDA_MEMORY") for e in shares["0000:03:00.0-serve"].env)
    assert "0000:03:00.0-0" not in shares and "0000:04:00.0-1" in shares  # replicas where no tenants
    assert train.cdi_name is None  # no CUDA library installed: no CDI gpu-share device (cdi warns)
    library = sim / "usr/lib/vgpukit/libvgpukit-cuda.so"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"\x7fELF")
    inv = collect(app.host, app.nvml, Options(replicas=2, qos=load_base(app.host, default_config_path(app.host))))
    train = next(d for d in inv.resources["vgpukit.io/gpu-share"] if d.id == "0000:03:00.0-train")
    assert train.cdi_name == "vgpukit.io/gpu-share=train"  # the tenant's CDI device (vgpukit/cdi/share.py)
    assert "LD_PRELOAD=/usr/lib/vgpukit/libvgpukit-cuda.so" in train.env and "VGPUKIT_QOS_SHARE=30" in train.env
    assert "/usr/lib/vgpukit/libvgpukit-cuda.so" in {m.container_path for m in train.mounts}


def test_a_failed_host_read_keeps_the_plugin_serving(short_tmp: Path) -> None:
    from vgpukit.errors import InvalidInput

    sim = hgx(short_tmp / "h")
    real = poller(sim)
    calls = [0]

    def flaky() -> Inventory:
        calls[0] += 1
        if calls[0] == 2:
            raise InvalidInput("/etc/vgpukit/qos.yaml:3:20: $.gpus.gpu0.tenants.w.share: expected int <= 100")
        return real()

    manager = Manager(sim_host(sim), flaky)
    events: list[str] = []
    stop = Stop()
    thread = threading.Thread(target=manager.run, args=(stop, 0.02, events.append), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while calls[0] < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert thread.is_alive() and calls[0] >= 4
        assert any(e.startswith("reading the host failed (devices unchanged): ") for e in events)
        assert len(manager.plugins[VF_POOL].state.devices) == 6
    finally:
        stop.set()
        thread.join(10)
    assert not list(plugin_dir(manager.host).glob("vgpukit-*.sock"))  # sockets removed on exit


def test_the_command_serves_registers_and_stops_on_sigterm(short_tmp: Path) -> None:
    sim = hgx(short_tmp / "h")
    kubelet = Kubelet(plugin_dir(sim_host(sim))).start()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "k8s", "device-plugin", "--interval", "0.1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert kubelet.wait(lambda: len(_devices_of(kubelet, MIG_3G)) == 3, timeout=30)
        _chosen, resp = kubelet.allocate(MIG_3G, 1)
        assert resp.cdi_devices[0].name.startswith("vgpukit.io/mig=MIG-")
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
        kubelet.stop()
    assert proc.returncode == 0, err
    assert "registered vgpukit.io/mig-3g.20gb" in err
    assert not list(plugin_dir(sim_host(sim)).glob("vgpukit-*.sock"))


def _devices_of(k: Kubelet, resource: str) -> dict[str, str]:
    ep = k.endpoints.get(resource)
    return dict(ep.devices) if ep else {}


def test_an_unusable_gpu_is_unhealthy_and_recovers_after_the_debounce(short_tmp: Path) -> None:
    from vgpukit.health import fact
    from vgpukit.k8s.plugin import RECOVER_POLLS

    sim = hgx(short_tmp / "h")
    host = sim_host(sim)

    def unusable() -> dict[str, str]:
        app = App(sim_dir=sim, wiring=Wiring())
        try:
            return fact.unusable(fact.current(app.host, app.nvml))
        finally:
            app.close()

    kubelet = Kubelet(plugin_dir(host)).start()
    manager = Manager(host, poller(sim), health=unusable)
    try:
        r = Running.__new__(Running)
        r.kubelet, r.sim = kubelet, sim
        manager.poll()
        manager.poll()
        assert kubelet.wait(lambda: MIG_3G in kubelet.endpoints and len(_devices(r, MIG_3G)) == 3)
        assert set(_devices(r, MIG_3G).values()) == {HEALTHY}
        _ok(sim, "sim", "fault", "xid", "gpu0", "79")  # gpu0 falls off the bus: its two 3g slices
        events = manager.poll()
        assert any("0000:03:00.0 unhealthy" in e for e in events)
        assert kubelet.wait(lambda: sorted(_devices(r, MIG_3G).values()) == [HEALTHY, UNHEALTHY, UNHEALTHY])
        _ok(sim, "sim", "fault", "recover", "gpu0")
        for _ in range(RECOVER_POLLS - 1):  # debounce: still unhealthy until enough good polls
            manager.poll()
            assert sorted(_devices(r, MIG_3G).values()) == [HEALTHY, UNHEALTHY, UNHEALTHY]
        assert any("healthy again" in e for e in manager.poll())
        assert kubelet.wait(lambda: set(_devices(r, MIG_3G).values()) == {HEALTHY})
    finally:
        manager.close()
        kubelet.stop()


def test_a_vgpu_on_a_vf_is_offered_as_its_vgpu_type(tmp_path: Path) -> None:
    """NVIDIA's vendor VFIO: a VF with a vGPU type (on ``nvidia``, its /dev/vfio/<group> registered) is
    a device of the type's resource, its CDI name the VF's; the GPU's other VFs are offered as nothing."""
    sim = make_sim(tmp_path / "h100", "h100-vgpu")
    _ok(sim, "vgpu", "create", "gpu0", "--type", "H100-20C")
    inv = collector(sim)
    (dev,) = inv.resources["vgpukit.io/vgpu-h100-20c"]
    group = (sim / "sys/bus/pci/devices/0000:41:00.4/iommu_group").readlink().name
    assert (dev.id, dev.cdi_name) == ("0000:41:00.4", "vgpukit.io/vf=0000:41:00.4")
    assert dev.nodes == ("/dev/vfio/vfio", f"/dev/vfio/{group}") and dev.watch == (f"/dev/vfio/{group}",)
    assert not any(r.startswith("vgpukit.io/vf-") for r in inv.resources)
