"""MIG slices made on demand by the DRA plugin (partitionable devices): published with shared counters,
created at prepare at the placement the scheduler chose, destroyed at unprepare; crash-safe."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.conftest import invoke, make_sim
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_plugin import NODE, Node, claim, opener, unusable
from vgpukit.k8s.dra.api import ClaimReader, resource_api
from vgpukit.k8s.dra.server import Driver, Plugin
from vgpukit.k8s.dra.slices import Publisher, slice_name
from vgpukit.sim.nvml import SimNvml

GPU0 = "gpu-0000-03-00-0"
SLICE_3G_4 = f"{GPU0}-mig-3g-20gb-4"  # a 3g.20gb GPU instance at memory slot 4 of gpu0


def _ok(sim: Path, *args: str) -> str:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr
    return r.stdout


def layout(sim: Path, gpu: int = 0) -> list[tuple[int, int, int]]:
    """(profile id, start, compute instances) of each GPU instance, as the simulated driver has them."""
    n = SimNvml(sim)
    try:
        return sorted((g.profile_id, g.start, len(g.compute_instances)) for g in n.gpu_instances(gpu))
    finally:
        n.close()


def mig_nodes(node: Node, uuid: str) -> list[str]:
    """The device nodes the CDI collector gives the MIG device ``uuid``."""
    from vgpukit.cdi import spec as cdi

    nvml = SimNvml(node.sim)
    try:
        specs, _ = cdi.collect(node.host, nvml)
    finally:
        nvml.close()
    return [
        n["path"]
        for s in specs
        if s.kind.endswith("/mig")
        for d in s.devices
        if d.name == uuid
        for n in (d.edits + s.edits).to_dict().get("deviceNodes", [])
    ]


def mig_host(path: Path) -> Path:
    """hgx-a100 with gpu0 in MIG mode holding one 1g.5gb (made by an operator: slot 6), gpu1 MIG off."""
    sim = make_sim(path)
    _ok(sim, "partition", "gpu0", "--mig", "1g.5gb")
    assert layout(sim) == [(19, 6, 1)]
    return sim


class OnDemandNode(Node):
    mode = "on"

    def start(self) -> None:
        self.driver = Driver(NODE, opener(self.sim), self.reader, unusable(self.sim), self.mode)
        self.plugin = Plugin(self.host, self.driver, interval=0.1).start()
        from tests.k8s.drakubelet import DraKubelet
        from vgpukit.k8s.dra.server import registry_socket

        resolve = lambda shown: self.host.socket_address(self.host.path(*shown.strip("/").split("/")))  # noqa: E731
        self.kubelet = DraKubelet(registry_socket(self.host).parent, resolve)
        self.kubelet.register()


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE)
    yield server
    server.close()


@pytest.fixture
def node(short_tmp: Path, api: ApiServer) -> Iterator[OnDemandNode]:
    n = OnDemandNode(mig_host(short_tmp / "h"), api)
    yield n
    n.close()


def publish(node: Node, api: ApiServer) -> dict[str, dict[str, Any]]:
    """The node's slices as the API server stores them after a publish (none of its writes refused)."""
    client = resource_api(str(api.kubeconfig(node.sim.parent / "kubeconfig")))
    Publisher(client, NODE).publish(*node.driver.publication())
    assert api.refused == [] and api.pool_problems() == []
    return dict(api.slices)


def gathered(slices: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The pool's counter sets and devices by name, whichever slices hold them (the release's layout)."""
    sets = {c["name"]: c for d in slices.values() for c in d["spec"].get("sharedCounters") or []}
    devices = {v["name"]: v for d in slices.values() for v in d["spec"].get("devices") or []}
    return sets, devices


@pytest.mark.parametrize("release", ["1.34", "1.37"])
def test_a_mig_gpu_is_published_with_its_counters_and_every_placement_it_could_still_hold(
    short_tmp: Path,
    release: str,
) -> None:
    api = ApiServer(NODE, release)
    api.partitionable = True
    node = OnDemandNode(mig_host(short_tmp / "h"), api)
    try:
        slices = publish(node, api)
        part = f"{slice_name(NODE)}-{GPU0}"
        if release == "1.34":  # the GPU's counters beside its devices; gpu1 (Ampere, MIG off) offers no slices
            assert sorted(slices) == [slice_name(NODE), part]
        else:  # the counters in a slice of their own
            assert sorted(slices) == [slice_name(NODE), f"{slice_name(NODE)}-counters", part]
        for doc in slices.values():
            clean = {k: v for k, v in doc.items() if k != "metadata"} | {"metadata": {"name": doc["metadata"]["name"]}}
            kubernetes_validate.validate(clean, release, strict=True)
            assert doc["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": len(slices)}
        sets, names = gathered(slices)
        counters = sets[GPU0]
        assert {f"memory-slice-{k}" for k in range(8)} <= set(counters["counters"])
        assert counters["counters"]["compute-slices"] == {"value": "7"}
        assert {f"{GPU0}-mig-3g-20gb-0", f"{GPU0}-mig-4g-20gb-0", f"{GPU0}-mig-1g-5gb-5"} <= set(names)
        # slot 6 holds the operator's 1g.5gb: nothing overlapping it is offered
        assert not {SLICE_3G_4, f"{GPU0}-mig-7g-40gb-0", f"{GPU0}-mig-1g-5gb-6", f"{GPU0}-mig-1g-10gb-6"} & set(names)
        assert GPU0 not in names  # Ampere in MIG mode: its slices only, no whole GPU
        dev = names[f"{GPU0}-mig-3g-20gb-0"]
        assert dev["attributes"]["migProfile"] == {"string": "3g.20gb"} and dev["attributes"]["placementStart"] == {
            "int": 0
        }
        assert dev["attributes"]["parentUUID"]["string"].startswith("GPU-")
        (use,) = dev["consumesCounters"]
        assert use["counterSet"] == GPU0
        slots = sorted(k for k in use["counters"] if k.startswith("memory-slice-"))
        assert slots == [f"memory-slice-{k}" for k in range(4)] and use["counters"]["compute-slices"] == {"value": "3"}
        static = [d for d in slices[slice_name(NODE)]["spec"]["devices"] if d["attributes"]["kind"]["string"] == "mig"]
        assert len(static) == 1 and static[0]["name"].startswith("mig-")  # the operator's slice stays static
    finally:
        node.close()
        api.close()


def test_a_claim_for_a_placement_creates_it_at_prepare_and_unprepare_destroys_it(node: OnDemandNode) -> None:
    _ok(node.sim, "mig", "destroy", "gpu0", "--all")  # the whole GPU free
    ref = node.add(claim("u-1", "c1", SLICE_3G_4))
    first = node.kubelet.prepare(ref).claims["u-1"]
    assert first.error == ""
    assert layout(node.sim) == [(9, 4, 1)]  # a 3g.20gb GPU instance at slot 4 with its compute instance
    (cdi_id,) = first.devices[0].cdi_device_ids
    spec = json.loads(node.files("u-1")[0].read_text())
    assert node.files("u-1")[0].parent == node.host.path("run", "cdi")
    kind, _, name = cdi_id.partition("=")
    (dev,) = [d for d in spec["devices"] if d["name"] == name]
    assert spec["kind"] == kind
    paths = [n["path"] for n in dev["containerEdits"]["deviceNodes"]]
    assert any("nvidia-caps" in p for p in paths), paths  # the MIG device's capability nodes
    uuid = SimNvml(node.sim).gpu_instances(0)[0].compute_instances[0].uuid
    assert sorted(paths) == sorted(mig_nodes(node, uuid))  # exactly the new MIG device's (and the GPU's)
    assert node.kubelet.prepare(ref).claims["u-1"] == first  # again: the same answer, nothing more made
    assert layout(node.sim) == [(9, 4, 1)]
    assert node.kubelet.unprepare(ref).claims["u-1"].error == ""
    assert layout(node.sim) == []
    assert not any(p.exists() for p in node.files("u-1")) and not node.host.dra_made_record("u-1").exists()
    assert node.kubelet.unprepare(ref).claims["u-1"].error == ""  # unknown now: nothing to do
    assert node.kubelet.unprepare(("default", "x", "u-never")).claims["u-never"].error == ""


def test_the_made_slice_keeps_its_device_and_is_not_published_as_a_static_one(
    node: OnDemandNode, api: ApiServer
) -> None:
    ref = node.add(claim("u-2", "c2", f"{GPU0}-mig-3g-20gb-0"))
    assert node.kubelet.prepare(ref).claims["u-2"].error == ""
    slices = publish(node, api)
    static = [d["name"] for d in slices[slice_name(NODE)]["spec"]["devices"] if d["name"].startswith("mig-")]
    assert len(static) == 1  # the operator's 1g.5gb only
    names = {d["name"] for d in slices[f"{slice_name(NODE)}-{GPU0}"]["spec"]["devices"]}
    assert f"{GPU0}-mig-3g-20gb-0" in names and f"{GPU0}-mig-1g-5gb-0" in names  # counters keep them apart


def test_a_second_claim_on_an_overlapping_placement_is_refused_clearly(node: OnDemandNode) -> None:
    assert node.kubelet.prepare(node.add(claim("u-a", "a", f"{GPU0}-mig-3g-20gb-0"))).claims["u-a"].error == ""
    out = node.kubelet.prepare(node.add(claim("u-b", "b", f"{GPU0}-mig-2g-10gb-2"))).claims["u-b"]
    assert "2g.10gb at slots 2-3: taken" in out.error and "3g.20gb" in out.error, out.error
    assert not out.devices and layout(node.sim) == [(9, 0, 1), (19, 6, 1)]
    assert not any(p.exists() for p in node.files("u-b")) and not node.host.dra_made_record("u-b").exists()


def test_a_restarted_plugin_destroys_what_it_made(node: OnDemandNode) -> None:
    ref = node.add(claim("u-r", "r", f"{GPU0}-mig-2g-10gb-2"))
    assert node.kubelet.prepare(ref).claims["u-r"].error == ""
    node.restart()
    assert node.kubelet.prepare(ref).claims["u-r"].error == ""  # re-served from the record
    assert node.kubelet.unprepare(ref).claims["u-r"].error == ""
    assert layout(node.sim) == [(19, 6, 1)]


def test_unprepare_of_a_slice_in_use_is_refused_and_destroys_nothing(node: OnDemandNode) -> None:
    ref = node.add(claim("u-busy", "busy", f"{GPU0}-mig-4g-20gb-0"))
    assert node.kubelet.prepare(ref).claims["u-busy"].error == ""
    gi = next(g for g in SimNvml(node.sim).gpu_instances(0) if g.start == 0)
    pid = _ok(node.sim, "sim", "client", "add", "0", "train", "--gi", str(gi.id)).strip()
    out = node.kubelet.unprepare(ref).claims["u-busy"]
    assert "is used by" in out.error and "train" in out.error, out.error
    assert (5, 0, 1) in layout(node.sim) and all(p.exists() for p in node.files("u-busy"))
    _ok(node.sim, "sim", "client", "remove", pid)
    assert node.kubelet.unprepare(ref).claims["u-busy"].error == ""
    assert layout(node.sim) == [(19, 6, 1)]


def test_without_the_feature_gate_the_static_view_is_published(
    short_tmp: Path,
    api: ApiServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The gate off: the dry run before the first write shows the API server drops the counters, so ``auto``
    publishes the static view from the first write (it used to write the counters and read them back:
    a partitionable generation 1, then the static one); the gate on: the partitionable view."""
    sim = mig_host(short_tmp / "h")
    api.partitionable = False  # the cluster drops sharedCounters / consumesCounters
    client = resource_api(str(api.kubeconfig(short_tmp / "kubeconfig")))
    driver = Driver(NODE, opener(sim), ClaimReader(client), unusable(sim), "auto")
    plugin = Plugin(node_host(sim), driver, interval=0.1, publisher=Publisher(client, NODE, "auto")).start()
    try:

        def static() -> bool:
            main = api.slices.get(slice_name(NODE), {}).get("spec", {}).get("pool", {})
            return sorted(api.slices) == [slice_name(NODE)] and main.get("resourceSliceCount") == 1

        with caplog.at_level(logging.INFO, "vgpukit.k8s.dra"):
            assert api.wait(lambda: driver.counters_ok is False and static(), timeout=30)
            api.wait(lambda: False, timeout=0.5)  # a few more polls: said once
        doc = api.slices[slice_name(NODE)]
        assert doc["spec"]["pool"]["generation"] == 1  # static from the first write
        assert sum("publishing existing devices only" in r.getMessage() for r in caplog.records) == 1
        assert not any(d["name"].startswith(GPU0 + "-mig-") for d in doc["spec"]["devices"])
        assert api.refused == []
    finally:
        plugin.close()
    api.partitionable = True  # the gate on: auto keeps the counters
    api.slices.clear()
    driver = Driver(NODE, opener(sim), ClaimReader(client), unusable(sim), "auto")
    plugin = Plugin(node_host(sim), driver, interval=0.1, publisher=Publisher(client, NODE, "auto")).start()
    try:
        assert api.wait(lambda: f"{slice_name(NODE)}-{GPU0}" in api.slices, timeout=30)
        assert driver.counters_ok and gathered(api.slices)[0][GPU0]["counters"]
    finally:
        plugin.close()


def node_host(sim: Path) -> Any:
    from tests.conftest import sim_host

    return sim_host(sim)


def _plugin(sim: Path, kubeconfig: Path, crash_at: int = 0) -> Any:
    import os
    import subprocess
    import sys

    from vgpukit.sim.nvml import CRASH_ENV

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    if crash_at:
        env[CRASH_ENV] = str(crash_at)
    cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "k8s", "dra-plugin", "--node", NODE]
    cmd += ["--kubeconfig", str(kubeconfig), "--interval", "0.5", "--partitionable", "on"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kubelet(sim: Path) -> Any:
    import time

    from tests.k8s.drakubelet import DraKubelet
    from vgpukit.k8s.dra.server import registry_socket

    host = node_host(sim)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            kubelet = DraKubelet(
                registry_socket(host).parent, lambda shown: host.socket_address(host.path(*shown.strip("/").split("/")))
            )
            kubelet.register()
            return kubelet
        except Exception:  # not listening yet (or the stale socket of the killed run)
            time.sleep(0.1)
    raise AssertionError("the plugin did not register")


@pytest.mark.parametrize("crash_at", [1, 2])  # killed before creating the GPU instance / its compute instance
def test_kill_9_mid_prepare_leaks_no_slice(short_tmp: Path, api: ApiServer, crash_at: int) -> None:
    import grpc

    from tests.engine.helpers import journal_left, vgpukit

    sim = mig_host(short_tmp / "h")
    kubeconfig = api.kubeconfig(short_tmp / "kubeconfig")
    api.claims[("default", "k")] = claim("u-k", "k", f"{GPU0}-mig-3g-20gb-0")
    proc = _plugin(sim, kubeconfig, crash_at)
    try:
        kubelet = _kubelet(sim)
        with pytest.raises(grpc.RpcError):
            kubelet.prepare(("default", "k", "u-k"))
        assert proc.wait(timeout=30) == -9
        kubelet.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert journal_left(sim)  # killed inside the engine run that records and creates
    if crash_at == 1:  # the next command repairs it: no slice, no record
        r = vgpukit(sim, "recover")
        assert r.returncode == 0 and "recovering an interrupted change" in r.stderr + r.stdout, r.stderr
        assert layout(sim) == [(19, 6, 1)] and not node_host(sim).dra_made_record("u-k").exists()
        return
    proc = _plugin(sim, kubeconfig)  # restarted: the kubelet prepares again, then unprepares
    try:
        kubelet = _kubelet(sim)
        assert kubelet.prepare(("default", "k", "u-k")).claims["u-k"].error == ""
        assert layout(sim) == [(9, 0, 1), (19, 6, 1)]
        assert kubelet.unprepare(("default", "k", "u-k")).claims["u-k"].error == ""
        assert layout(sim) == [(19, 6, 1)] and not journal_left(sim)
        kubelet.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_slice_made_before_the_claim_was_recorded_is_kept_or_destroyed(node: OnDemandNode) -> None:
    """Killed after the run that records and makes the slice, before the claim's spec and record: the
    next prepare keeps the slice (no second one), the next unprepare destroys it."""
    from vgpukit.clikit.context import App
    from vgpukit.k8s.dra import ondemand
    from vgpukit.wiring import Wiring

    app = App(sim_dir=node.sim, wiring=Wiring())
    try:
        ondemand.prepare(app.env, "u-p", [f"{GPU0}-mig-3g-20gb-0"])
        ondemand.prepare(app.env, "u-u", [f"{GPU0}-mig-1g-5gb-4"])
    finally:
        app.close()
    assert layout(node.sim) == [(9, 0, 1), (19, 4, 1), (19, 6, 1)]
    assert not node.host.dra_claim_record("u-p").exists() and node.host.dra_made_record("u-p").exists()
    ref = node.add(claim("u-p", "p", f"{GPU0}-mig-3g-20gb-0"))
    assert node.kubelet.prepare(ref).claims["u-p"].error == ""
    assert layout(node.sim) == [(9, 0, 1), (19, 4, 1), (19, 6, 1)]  # kept: not made twice
    assert node.kubelet.unprepare(("default", "u", "u-u")).claims["u-u"].error == ""  # no claim record
    assert layout(node.sim) == [(9, 0, 1), (19, 6, 1)] and not node.host.dra_made_record("u-u").exists()
    assert node.kubelet.unprepare(ref).claims["u-p"].error == ""
    assert layout(node.sim) == [(19, 6, 1)]


def test_a_1_35_server_with_the_gate_on_gets_counter_sets_in_slices_of_their_own(
    short_tmp: Path,
) -> None:
    """1.35 refuses counters beside devices: the plugin, knowing the release before it writes, publishes
    its layout (it used to write 1.34's, be refused, and fall back to the static view)."""
    api = ApiServer(NODE, "1.35")
    api.partitionable = True
    sim = mig_host(short_tmp / "h")
    client = resource_api(str(api.kubeconfig(short_tmp / "kubeconfig")))
    driver = Driver(NODE, opener(sim), ClaimReader(client), unusable(sim), "auto")
    plugin = Plugin(node_host(sim), driver, interval=0.1, publisher=Publisher(client, NODE, "auto")).start()
    try:
        assert api.wait(lambda: f"{slice_name(NODE)}-counters" in api.slices and not api.pool_problems(), timeout=30)
        assert driver.counters_ok and api.refused == []
    finally:
        plugin.close()
        api.close()


def test_a_made_slice_is_in_the_health_stream_under_its_allocated_name(node: OnDemandNode) -> None:
    from vgpukit.k8s.drahealth_v1 import api_pb2 as hl

    name = f"{GPU0}-mig-2g-10gb-0"
    assert node.kubelet.prepare(node.add(claim("u-h", "h", name))).claims["u-h"].error == ""
    node.kubelet.watch()
    assert node.kubelet.wait(lambda: node.kubelet.health.get(name, (0,))[0] == hl.HEALTHY)
    _ok(node.sim, "sim", "fault", "xid", "gpu0", "79")  # gpu0 falls off the bus
    assert node.kubelet.wait(lambda: node.kubelet.health[name][0] == hl.UNHEALTHY)


def test_mps_in_a_slice_made_at_prepare_serves_its_mig_device_and_stops_before_the_slice_goes(
    node: OnDemandNode,
) -> None:
    import os
    import signal

    from tests.k8s.test_dra_sharing import V, _crash, opaque
    from vgpukit.k8s.dra import mps

    cfg = [opaque({"apiVersion": V, "kind": "MpsConfig", "activeThreadPercentage": 50})]
    doc = claim("u-m", "m", f"{GPU0}-mig-3g-20gb-0", config=cfg)
    ref = node.add(doc)
    try:
        out = node.kubelet.prepare(ref).claims["u-m"]
        assert out.error == "", out.error
        assert layout(node.sim) == [(9, 0, 1), (19, 6, 1)]  # the slice made at slots 0-3
        gi = next(g for g in SimNvml(node.sim).gpu_instances(0) if g.start == 0)
        uuid = gi.compute_instances[0].uuid
        assert mps.pid(node.host, uuid) is not None  # a daemon for the new MIG device, not the GPU
        log = (mps.directory(node.host, uuid) / "log" / "control.log").read_text()
        assert f"CUDA_VISIBLE_DEVICES={uuid}" in log and "set_default_active_thread_percentage 50" in log
        spec = json.loads(node.files("u-m")[0].read_text())
        (dev,) = spec["devices"]
        edits = dev["containerEdits"]
        assert sorted(n["path"] for n in edits["deviceNodes"]) == sorted(mig_nodes(node, uuid))
        pipe = node.host.display(mps.directory(node.host, uuid) / "pipe")
        assert (
            f"CUDA_MPS_PIPE_DIRECTORY={pipe}" in edits["env"] and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in edits["env"]
        )
        assert any(m["containerPath"] == pipe for m in edits["mounts"])
        # killed right after the daemon stopped in unprepare: the slice is still there (the daemon goes first)
        assert _crash(node.sim, "mps", doc, "unprepare") == -signal.SIGKILL
        assert mps.pid(node.host, uuid) is None and (9, 0, 1) in layout(node.sim)
        _ok(node.sim, "recover")  # the unprepare undone as a whole: the daemon runs again on the slice
        assert mps.pid(node.host, uuid) is not None and (9, 0, 1) in layout(node.sim)
        assert node.kubelet.unprepare(ref).claims["u-m"].error == ""
        assert mps.pid(node.host, uuid) is None and layout(node.sim) == [(19, 6, 1)]
        assert not node.host.dra_made_record("u-m").exists()
    finally:
        base = node.host.state_dir("dra", "mps")
        for d in base.iterdir() if base.is_dir() else []:  # no daemon outlives the test
            left = mps.pid(node.host, d.name)
            if left:
                os.kill(left, signal.SIGKILL)
