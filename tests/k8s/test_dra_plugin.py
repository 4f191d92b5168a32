"""The DRA plugin (``vgpukit k8s dra-plugin``) against a kubelet-side peer and an API-server stub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke, make_sim, sim_host
from tests.k8s.apiserver import ApiServer
from tests.k8s.drakubelet import DraKubelet
from vgpukit.clikit.context import App
from vgpukit.k8s.dra.api import ClaimReader, resource_api
from vgpukit.k8s.dra.devices import DRIVER
from vgpukit.k8s.dra.server import Driver, Plugin, registry_socket
from vgpukit.k8s.drahealth_v1 import api_pb2 as hl
from vgpukit.node.inventory import Options, collect
from vgpukit.wiring import Wiring

NODE = "node-1"


def _ok(sim: Path, *args: str) -> None:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr


def opener(sim: Path) -> Any:
    def open_host() -> Any:
        app = App(sim_dir=sim, command="vgpukit k8s dra-plugin", wiring=Wiring())
        return app.env, lambda only=None: collect(app.host, app.nvml, Options(replicas=1), only=only), app.close

    return open_host


def unusable(sim: Path) -> Any:
    from vgpukit.health import fact

    def look() -> dict[str, str]:
        app = App(sim_dir=sim, wiring=Wiring())
        try:
            return fact.unusable(fact.current(app.host, app.nvml))
        finally:
            app.close()

    return look


def claim(uid: str, name: str, *devices: str, ns: str = "default", **extra: Any) -> dict[str, Any]:
    results = [{"request": f"r{i}", "driver": DRIVER, "pool": NODE, "device": d} for i, d in enumerate(devices)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "status": {"allocation": {"devices": {"results": results, **extra}}},
    }


class Node:
    """A simulated host, the plugin serving it, the API-server stub with the claims, the kubelet peer."""

    def __init__(self, sim: Path, api: ApiServer) -> None:
        self.sim, self.api = sim, api
        self.host = sim_host(sim)
        self.reader = ClaimReader(resource_api(str(api.kubeconfig(sim.parent / "kubeconfig"))))
        self.start()

    def start(self) -> None:
        self.driver = Driver(NODE, opener(self.sim), self.reader, unusable(self.sim))
        self.plugin = Plugin(self.host, self.driver, interval=0.1).start()
        resolve = lambda shown: self.host.socket_address(self.host.path(*shown.strip("/").split("/")))  # noqa: E731
        self.kubelet = DraKubelet(registry_socket(self.host).parent, resolve)
        self.kubelet.register()

    def restart(self) -> None:
        self.close()
        self.start()

    def add(self, doc: dict[str, Any]) -> tuple[str, str, str]:
        meta = doc["metadata"]
        self.api.claims[(meta["namespace"], meta["name"])] = doc
        return meta["namespace"], meta["name"], meta["uid"]

    def files(self, uid: str) -> list[Path]:
        return [self.host.dra_claim_cdi_spec(uid), self.host.dra_claim_record(uid)]

    def close(self) -> None:
        self.kubelet.close()
        self.plugin.close()


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE)
    yield server
    server.close()


def hgx(path: Path) -> Path:
    sim = make_sim(path)
    _ok(sim, "sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci")
    _ok(sim, "partition", "gpu0", "--mig", "3g.20gb,3g.20gb")
    return sim


def test_registration_names_the_driver_its_socket_and_the_dra_v1_service(short_tmp: Path, api: ApiServer) -> None:
    node = Node(hgx(short_tmp / "h"), api)
    try:
        info = node.kubelet.info
        versions = ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        assert (info.type, info.name, list(info.supported_versions)) == ("DRAPlugin", DRIVER, versions)
        assert info.endpoint == f"/var/lib/kubelet/plugins/{DRIVER}/dra.sock"
        assert node.driver.registered is True
    finally:
        node.close()


def test_prepare_each_static_kind_is_idempotent_and_unprepare_removes_it(short_tmp: Path, api: ApiServer) -> None:
    node = Node(hgx(short_tmp / "h"), api)
    try:
        offered = node.driver.devices()
        kinds = {d.kind: name for name, d in sorted(offered.items(), reverse=True)}
        assert set(kinds) == {"gpu", "mig", "vf"}
        assert kinds["vf"].startswith("vf-0000-") and offered[kinds["vf"]].device.id.startswith("0000:")
        ref = node.add(claim("u-1", "c1", kinds["gpu"], kinds["mig"], kinds["vf"]))
        first = node.kubelet.prepare(ref).claims["u-1"]
        assert first.error == ""
        assert [list(d.cdi_device_ids) for d in first.devices] == [
            [f"vgpukit.io/claim=u-1-{kinds[k]}"] for k in ("gpu", "mig", "vf")
        ]
        assert {d.pool_name for d in first.devices} == {NODE}
        spec = json.loads(node.files("u-1")[0].read_text())
        assert spec["kind"] == "vgpukit.io/claim" and len(spec["devices"]) == 3
        vf_nodes = [n["path"] for n in spec["devices"][2]["containerEdits"]["deviceNodes"]]
        assert any(p.startswith("/dev/vfio/") for p in vf_nodes)
        before = [p.read_text() for p in node.files("u-1")]
        assert node.kubelet.prepare(ref).claims["u-1"] == first  # the same answer again
        assert [p.read_text() for p in node.files("u-1")] == before
        assert node.kubelet.unprepare(ref).claims["u-1"].error == ""
        assert not any(p.exists() for p in node.files("u-1"))
        assert node.kubelet.unprepare(ref).claims["u-1"].error == ""  # unknown claim: nothing to do
    finally:
        node.close()


def test_prepare_reads_only_the_claims_functions_and_refuses_a_vf_gone_since(short_tmp: Path, api: ApiServer) -> None:
    """A prepare's cost follows the claim, not the host: the inventory it reads is the claim's PCI
    functions (with their PFs); a VF no longer on the node is still refused."""
    node = Node(hgx(short_tmp / "h"), api)
    try:
        vf = next(n for n, d in sorted(node.driver.devices().items()) if d.kind == "vf")
        bdf = node.driver.devices()[vf].device.id
        asked: list[Any] = []
        open_host = node.driver.open_host

        def recording() -> Any:
            env, collect, close = open_host()
            return env, lambda only=None: asked.append(only) or collect(only=only), close

        node.driver.open_host = recording
        assert node.kubelet.prepare(node.add(claim("u-s", "s", vf))).claims["u-s"].error == ""
        assert asked == [{bdf}]
        assert node.kubelet.unprepare(("default", "s", "u-s")).claims["u-s"].error == ""
        _ok(node.sim, "sriov", "disable", "nic0")
        out = node.kubelet.prepare(node.add(claim("u-g", "g", vf))).claims["u-g"]
        assert f"no device {vf} on this node" in out.error and not out.devices
    finally:
        node.close()


def test_a_vgpu_on_a_vf_is_offered_and_prepared_with_its_vfio_group(short_tmp: Path, api: ApiServer) -> None:
    sim = make_sim(short_tmp / "v", "h100-vgpu")
    _ok(sim, "vgpu", "create", "gpu0", "--type", "H100-20C")
    node = Node(sim, api)
    try:
        (entry,) = [e for e in node.driver.slice_entries() if e["attributes"]["kind"]["string"] == "vf"]
        assert entry["name"] == "vf-0000-41-00-4" and "vgpuType" in entry["attributes"]
        resp = node.kubelet.prepare(node.add(claim("u-v", "v", entry["name"]))).claims["u-v"]
        assert resp.error == ""
        spec = json.loads(node.files("u-v")[0].read_text())
        group = (sim / "sys/bus/pci/devices/0000:41:00.4/iommu_group").readlink().name
        paths = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
        assert paths == ["/dev/vfio/vfio", f"/dev/vfio/{group}"]
        assert (sim / "sys/bus/pci/devices/0000:41:00.4/driver").readlink().name == "nvidia"  # not rebound
    finally:
        node.close()


def test_an_existing_mdev_is_prepared(short_tmp: Path, api: ApiServer) -> None:
    sim = make_sim(short_tmp / "g", "qemu-guest")
    _ok(sim, "mdev", "create", "mtty", "--type", "mtty-2")
    node = Node(sim, api)
    try:
        (name,) = [n for n, d in node.driver.devices().items() if d.kind == "mdev"]
        resp = node.kubelet.prepare(node.add(claim("u-m", "m", name))).claims["u-m"]
        assert resp.error == "" and list(resp.devices[0].cdi_device_ids) == [f"vgpukit.io/claim=u-m-{name}"]
    finally:
        node.close()


def test_a_restarted_plugin_still_unprepares(short_tmp: Path, api: ApiServer) -> None:
    node = Node(hgx(short_tmp / "h"), api)
    try:
        mig = next(n for n, d in node.driver.devices().items() if d.kind == "mig")
        ref = node.add(claim("u-2", "c2", mig))
        assert node.kubelet.prepare(ref).claims["u-2"].error == ""
        node.restart()
        assert all(p.exists() for p in node.files("u-2"))
        assert node.kubelet.unprepare(ref).claims["u-2"].error == ""
        assert not any(p.exists() for p in node.files("u-2"))
    finally:
        node.close()


def test_claims_phase_one_cannot_serve_are_refused_with_a_clear_error(short_tmp: Path, api: ApiServer) -> None:
    node = Node(hgx(short_tmp / "h"), api)
    try:
        out = node.kubelet.prepare(node.add(claim("u-3", "c3", "mig-1g-5gb-0"))).claims["u-3"]
        assert "no device mig-1g-5gb-0 on this node" in out.error and not out.devices
        cfg = [{"opaque": {"driver": DRIVER, "parameters": {"sharing": "MPS"}}}]
        gpu = next(n for n, d in node.driver.devices().items() if d.kind == "gpu")
        out = node.kubelet.prepare(node.add(claim("u-4", "c4", gpu, config=cfg))).claims["u-4"]
        assert out.error == "config entry 1: $: object missing required field kind" and not out.devices
        assert "not found" in node.kubelet.prepare(("default", "gone", "u-5")).claims["u-5"].error
        assert not any(p.exists() for u in ("u-3", "u-4", "u-5") for p in node.files(u))
    finally:
        node.close()


def test_health_stream_marks_a_lost_gpus_slices_unhealthy(short_tmp: Path, api: ApiServer) -> None:
    sim = hgx(short_tmp / "h")
    node = Node(sim, api)
    try:
        migs = sorted(n for n, d in node.driver.devices().items() if d.kind == "mig")
        node.kubelet.watch()
        assert node.kubelet.wait(lambda: all(node.kubelet.health.get(m, (0,))[0] == hl.HEALTHY for m in migs))
        _ok(sim, "sim", "fault", "xid", "gpu0", "79")  # gpu0 falls off the bus: its two slices
        assert node.kubelet.wait(lambda: all(node.kubelet.health[m][0] == hl.UNHEALTHY for m in migs))
        assert all(node.kubelet.health[m][1] for m in migs)  # with the health layer's reason
    finally:
        node.close()


def test_the_cli_serves_prepares_publishes_and_stops_on_sigterm(short_tmp: Path, api: ApiServer) -> None:
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    sim = hgx(short_tmp / "h")
    host = sim_host(sim)
    kubeconfig = api.kubeconfig(short_tmp / "kubeconfig")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "k8s", "dra-plugin", "--node", NODE]
    cmd += ["--kubeconfig", str(kubeconfig), "--interval", "0.2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []  # stderr as it comes: the publisher logs from its own thread, after the API answered
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not registry_socket(host).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        resolve = lambda shown: host.socket_address(host.path(*shown.strip("/").split("/")))  # noqa: E731
        kubelet = DraKubelet(registry_socket(host).parent, resolve)
        kubelet.register()
        assert api.wait(lambda: f"{NODE}-{DRIVER}" in api.slices, timeout=30)
        vf = next(d["name"] for d in api.slices[f"{NODE}-{DRIVER}"]["spec"]["devices"] if d["name"].startswith("vf-"))
        api.claims[("ns1", "c")] = claim("u-cli", "c", vf, ns="ns1")
        resp = kubelet.prepare(("ns1", "c", "u-cli")).claims["u-cli"]
        assert resp.error == "" and list(resp.devices[0].cdi_device_ids) == [f"vgpukit.io/claim=u-cli-{vf}"]
        kubelet.close()
        deadline = time.monotonic() + 30  # a loaded machine: the slice is stored before its answer is read
        while not any("(generation 1)" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        reader.join(timeout=20)
        out = proc.stdout.read()  # type: ignore[union-attr]
    err = "".join(lines)
    assert proc.returncode == 0, err
    assert "vgpukit DRA plugin" in out
    assert "vgpukit: registered with the kubelet" in err and "(generation 1)" in err
    assert not registry_socket(host).exists()
    assert host.dra_claim_record("u-cli").exists()  # prepared claims outlive the plugin


def test_an_unreadable_claim_record_is_an_error_without_its_content(short_tmp: Path, api: ApiServer) -> None:
    node = Node(hgx(short_tmp / "h"), api)
    try:
        record = node.host.dra_claim_record("u-bad")
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text("{secret-garbage")
        out = node.kubelet.unprepare(("default", "x", "u-bad")).claims["u-bad"]
        assert "unreadable" in out.error and "secret" not in out.error
    finally:
        node.close()


def test_a_vf_on_its_host_driver_is_bound_to_vfio_at_prepare_and_back_at_unprepare(
    short_tmp: Path, api: ApiServer
) -> None:
    from vgpukit.sriov.binding import current_driver

    sim = make_sim(short_tmp / "h")
    _ok(sim, "sriov", "enable", "nic1", "--vfs", "2")  # VFs on mlx5_core
    node = Node(sim, api)
    try:
        vfs = {n: d for n, d in node.driver.devices().items() if d.kind == "vf"}
        name, dev = sorted(vfs.items())[0]
        assert dev.host_driver == "mlx5_core" and current_driver(node.host, dev.device.id) == "mlx5_core"
        ref = node.add(claim("u-vf", "vf", name))
        out = node.kubelet.prepare(ref).claims["u-vf"]
        assert out.error == "", out.error
        assert current_driver(node.host, dev.device.id) == "vfio-pci"
        spec = json.loads(node.files("u-vf")[0].read_text())
        assert any(n["path"].startswith("/dev/vfio/") for n in spec["devices"][0]["containerEdits"]["deviceNodes"])
        assert node.kubelet.prepare(ref).claims["u-vf"] == out  # again: the same, nothing moved
        assert node.kubelet.unprepare(ref).claims["u-vf"].error == ""
        assert current_driver(node.host, dev.device.id) == "mlx5_core"
        assert not any(p.exists() for p in node.files("u-vf"))
    finally:
        node.close()


def test_the_v1beta1_service_answers_the_same(short_tmp: Path, api: ApiServer) -> None:
    from vgpukit.k8s.dra_v1beta1 import api_pb2 as beta
    from vgpukit.k8s.dra_v1beta1 import api_pb2_grpc as beta_rpc

    node = Node(hgx(short_tmp / "h"), api)
    try:
        mig = next(n for n, d in node.driver.devices().items() if d.kind == "mig")
        ns, name, uid = node.add(claim("u-b", "b", mig))
        stub = beta_rpc.DRAPluginStub(node.kubelet.channel)
        req = beta.NodePrepareResourcesRequest(claims=[beta.Claim(namespace=ns, name=name, uid=uid)])
        out = stub.NodePrepareResources(req, timeout=30).claims[uid]
        assert out.error == "" and list(out.devices[0].cdi_device_ids) == [f"vgpukit.io/claim=u-b-{mig}"]
        assert node.kubelet.prepare((ns, name, uid)).claims[uid].devices[0].device_name == mig  # v1: the same claim
        req2 = beta.NodeUnprepareResourcesRequest(claims=[beta.Claim(namespace=ns, name=name, uid=uid)])
        assert stub.NodeUnprepareResources(req2, timeout=30).claims[uid].error == ""
        assert not any(p.exists() for p in node.files(uid))
    finally:
        node.close()
