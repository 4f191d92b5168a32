"""GPUs shared by capacity (consumable capacity, KEP-5075): what the plugin publishes, the scheduler's
allocation math over it (tests/k8s/allocator.py), and each share's QoS tenant and memory cap at prepare."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import make_sim
from tests.k8s.allocator import Allocator, Unallocatable, q
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_plugin import NODE, Node, _ok, api, opener, unusable  # noqa: F401 (fixtures)
from tests.qos.conftest import DaemonProc
from vgpukit.errors import InvalidInput
from vgpukit.k8s.dra import capacity
from vgpukit.k8s.dra.capacity import canonical, quantity
from vgpukit.k8s.dra.devices import DRIVER
from vgpukit.k8s.dra.server import Driver, Plugin

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "dra"
LIBRARY = "usr/lib/vgpukit/libvgpukit-cuda.so"
GIB = 1 << 30


def shared_host(path: Path, library: bool = True, profile: str = "hgx-a100") -> Path:
    """hgx-a100 with two 3g.20gb slices on gpu1 and (``library``) the CUDA interception library installed."""
    sim = make_sim(path, profile)
    if profile == "hgx-a100":
        _ok(sim, "partition", "gpu1", "--mig", "3g.20gb,3g.20gb")
    if library:
        (sim / LIBRARY).parent.mkdir(parents=True, exist_ok=True)
        (sim / LIBRARY).write_text("a stand-in: the prepare only checks it is installed\n")
    return sim


def pod_cgroup(sim: Path, pod: str) -> None:
    """The pod's cgroup as the kubelet makes it (systemd driver, best effort), before it prepares claims."""
    cg = sim / "sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice"
    cg = cg / f"kubepods-besteffort-pod{pod.replace('-', '_')}.slice"
    cg.mkdir(parents=True)
    (cg / "cgroup.freeze").write_text("0")
    (cg / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    (cg / "cgroup.procs").write_text("")


class SharedNode(Node):
    """The plugin with ``--share-by-capacity`` (``share``), a kubelet peer registered with it."""

    share = "gpu,mig"

    def start(self) -> None:
        from tests.k8s.drakubelet import DraKubelet
        from vgpukit.k8s.dra.server import registry_socket

        choice = capacity.choice(self.share)
        self.driver = Driver(NODE, opener(self.sim), self.reader, unusable(self.sim), "off", "auto", share=choice)
        self.plugin = Plugin(self.host, self.driver, interval=0.1).start()
        resolve = lambda shown: self.host.socket_address(self.host.path(*shown.strip("/").split("/")))  # noqa: E731
        self.kubelet = DraKubelet(registry_socket(self.host).parent, resolve)
        self.kubelet.register()

    def slices(self) -> list[dict[str, Any]]:
        """The node's ResourceSlices as the plugin would write them (one, with its static devices)."""
        entries, parts = self.driver.publication()
        pool = {"name": NODE, "generation": 1, "resourceSliceCount": 1 + len(parts)}
        spec = {"driver": DRIVER, "nodeName": NODE, "pool": pool}
        docs = [{"metadata": {"name": f"{NODE}-{DRIVER}"}, "spec": {**spec, "devices": entries}}]
        docs += [{"metadata": {"name": f"{NODE}-{k}"}, "spec": {**spec, **v}} for k, v in parts.items()]
        return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **d} for d in docs]


@functools.cache
def classes() -> list[dict[str, Any]]:
    docs = [d for p in sorted(DEPLOY.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    return [d for d in docs if d["kind"] == "DeviceClass"]


def request_policy_errors(device: dict[str, Any]) -> list[str]:
    """The API server's checks of a device's capacities (pkg/apis/resource/validation, validateRequestPolicy)."""
    out = []
    for name, cap in (device.get("capacity") or {}).items():
        policy = cap.get("requestPolicy")
        if policy is None:
            continue
        if not device.get("allowMultipleAllocations"):
            out.append(f"{name}: allowMultipleAllocations must be true")
        value, rng = q(cap["value"]), policy.get("validRange")
        if "validValues" in policy and rng is not None:
            out.append(f"{name}: exactly one policy can be specified")
        if rng is None:
            continue
        default, lo, step = q(policy["default"]), q(rng["min"]), q(rng.get("step", "0"))
        hi = q(rng["max"]) if "max" in rng else None
        checks = [lo <= value, default >= lo, hi is None or lo <= hi <= value, hi is None or default <= hi]
        if step:
            checks += [lo + step <= value, (default - lo) % step == 0, hi is None or (hi - lo) % step == 0]
        if not all(checks):
            out.append(f"{name}: {policy} does not validate against {cap['value']}")
    return out


@pytest.fixture
def node(short_tmp: Path, api: ApiServer) -> Iterator[SharedNode]:  # noqa: F811
    n = SharedNode(shared_host(short_tmp / "h"), api)
    yield n
    n.close()


@pytest.fixture
def qos(node: SharedNode) -> Iterator[DaemonProc]:
    d = DaemonProc(node.sim, sim=True).start()
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.stop()


def tenants(d: DaemonProc, key: str) -> dict[str, Any]:
    return {t["name"]: t for g in d.req(op="status")["gpus"] if g["gpu"] == key for t in g["tenants"]}


# ----------------------------------------------------------------------------- what is published
def test_named_devices_are_published_shared_instead_of_exclusive_and_validate(node: SharedNode) -> None:
    entries = {e["name"]: e for e in node.driver.publication()[0]}
    exclusive = {n for n, d in node.driver.devices().items() if d.kind in ("gpu", "mig")}
    assert exclusive and not exclusive & set(entries)  # each shared, none also exclusive
    assert {capacity.shared_name(n) for n in exclusive} <= set(entries)
    gpu = entries[capacity.shared_name(sorted(n for n in exclusive if n.startswith("gpu-"))[0])]
    assert gpu["allowMultipleAllocations"] is True and gpu["attributes"]["kind"] == {"string": "shared-gpu"}
    assert gpu["attributes"]["multiprocessors"] == {"int": 98} and "multiprocessors" not in gpu["capacity"]
    mem, share = gpu["capacity"]["memory"], gpu["capacity"]["computeShare"]
    assert q(mem["value"]) == 40960 * (1 << 20)  # NVML's total (used + free) of the simulated A100-40GB
    assert mem["requestPolicy"] == {
        "default": canonical(10 * GIB),
        "validRange": {"min": "268435456", "max": canonical(40 * GIB), "step": "268435456"},
    }
    policy = {"default": "25", "validRange": {"min": "2", "max": "100", "step": "1"}}
    assert share == {"value": "100", "requestPolicy": policy}
    mig = next(e for e in entries.values() if e["attributes"]["kind"]["string"] == "shared-mig")
    assert (
        q(mig["capacity"]["memory"]["value"]) == 19968 * (1 << 20) and "devicePluginResource" not in mig["attributes"]
    )
    for e in entries.values():
        assert request_policy_errors(e) == []
    for doc in node.slices():
        for version in ("1.34", "1.37"):
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_api_servers_rules_catch_a_bad_policy() -> None:
    """The check above can fail: a default off the step, a max over the value."""
    good = capacity.capacities(40 * GIB)
    assert good is not None
    bad = json.loads(json.dumps(good))
    bad["memory"]["requestPolicy"]["default"] = "1000"
    bad["computeShare"]["requestPolicy"]["validRange"]["max"] = "101"
    assert len(request_policy_errors({"allowMultipleAllocations": True, "capacity": bad})) == 2
    assert len(request_policy_errors({"capacity": good})) == 2  # a policy needs allowMultipleAllocations


def test_without_the_cuda_library_devices_stay_exclusive(short_tmp: Path, api: ApiServer) -> None:  # noqa: F811
    n = SharedNode(shared_host(short_tmp / "h", library=False), api)
    try:
        names = {e["name"] for e in n.driver.publication()[0]}
        assert not any(x.startswith("shared-") for x in names) and any(x.startswith("gpu-") for x in names)
        assert any("libvgpukit-cuda.so is missing" in s for s in n.driver.capacity.said)
    finally:
        n.close()


def test_an_api_server_without_consumable_capacity_gets_the_exclusive_view(short_tmp: Path, api: ApiServer) -> None:  # noqa: F811
    from vgpukit.k8s.dra.api import resource_api
    from vgpukit.k8s.dra.slices import Publisher

    api.consumable_capacity = False  # the gate off (1.34, 1.35 by default): the fields are dropped
    n = SharedNode(shared_host(short_tmp / "h"), api)
    n.close()
    publisher = Publisher(resource_api(str(api.kubeconfig(short_tmp / "kc"))), NODE)
    plugin = Plugin(n.host, n.driver, interval=0.1, publisher=publisher).start()
    try:

        def view() -> set[str]:
            return {d["name"] for s in list(api.slices.values()) for d in s["spec"].get("devices") or []}

        assert api.wait(lambda: any(x.startswith("gpu-") for x in view()), timeout=20), view()
        assert not any(x.startswith("shared-") for x in view()) and n.driver.capacity.served is False
    finally:
        plugin.close()


def test_choice_parses_kinds_and_names_and_refuses_the_rest() -> None:
    assert capacity.choice("off") == capacity.Choice()
    c = capacity.choice("mig,gpu-0000-03-00-0")
    assert c.kinds == {"mig"} and c.names == {"gpu-0000-03-00-0"}
    for bad in ("", "gpu,", "GPU", "vf", "off,gpu", "gpu-\n", "x" * 70):
        with pytest.raises(InvalidInput):
            capacity.choice(bad)


@given(st.integers(0, 10**19))
def test_canonical_quantities_read_back_as_the_same_number(n: int) -> None:
    text = canonical(n)
    assert quantity(text, "x") == n and q(text) == n
    assert text == str(n) or (text[-1] in "kMGTPE" and not text[:-1].endswith("000"))


def test_quantity_reads_the_forms_the_api_server_writes_and_refuses_others() -> None:
    assert quantity("4Gi", "x") == 4 * GIB and quantity("1500m", "x") == Fraction(3, 2)
    assert quantity("2e3", "x") == 2000 and quantity("1E", "x") == 10**18 and quantity(".5", "x") == Fraction(1, 2)
    for bad in ("-1", "4gb", "", "1e", "4 Gi", None, 4, "1" * 65):
        with pytest.raises(InvalidInput):
            quantity(bad, "x")


# ----------------------------------------------------------------------------- the allocation math
def shared_claim(
    name: str, ns: str, memory: str | None = None, share: str | None = None, **extra: Any
) -> dict[str, Any]:
    asked = {k: v for k, v in (("memory", memory), ("computeShare", share)) if v is not None}
    exactly: dict[str, Any] = {"deviceClassName": "shared.gpu.vgpukit.io"}
    if asked:
        exactly["capacity"] = {"requests": asked}
    exactly["selectors"] = [{"cel": {"expression": 'device.attributes["gpu.vgpukit.io"].kind == "shared-gpu"'}}]
    meta = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}"}
    return {"metadata": meta, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}], **extra}}}


def test_the_allocation_math_rounds_defaults_and_refuses_past_capacity(node: SharedNode) -> None:
    one = [s for s in node.slices()]
    shared = [d for d in one[0]["spec"]["devices"] if d["attributes"]["kind"]["string"] == "shared-gpu"]
    one[0]["spec"]["devices"] = shared[:1]  # one shared GPU
    alloc = Allocator(one, classes())
    a = alloc.allocate(shared_claim("a", "team-a", memory="1000Mi"))["status"]["allocation"]["devices"]["results"][0]
    assert a["consumedCapacity"] == {"memory": str(1024 << 20), "computeShare": "25"}  # rounded up; default 25
    b = alloc.allocate(shared_claim("b", "team-b", share="1"))["status"]["allocation"]["devices"]["results"][0]
    assert b["consumedCapacity"] == {"memory": str(10 * GIB), "computeShare": "2"}  # default memory, min share
    assert a["device"] == b["device"] and a["shareID"] != b["shareID"]
    with pytest.raises(Unallocatable):  # 25 + 2 + 74 > 100
        alloc.allocate(shared_claim("c", "team-c", share="74"))
    alloc.allocate(shared_claim("c", "team-c", share="73", memory="29Gi"))  # 100% and 1 GiB + 10 GiB + 29 GiB: 40 GiB
    with pytest.raises(Unallocatable):
        alloc.allocate(shared_claim("d", "team-d", share="1", memory="1"))
    odd = shared_claim("e", "team-e")
    odd["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"bandwidth": "1"}}
    with pytest.raises(Unallocatable):  # a capacity the device does not have: it does not fit
        Allocator(one, classes()).allocate(odd)


@given(st.lists(st.tuples(st.integers(1, 48 * 1024), st.integers(1, 120)), max_size=12))
@settings(deadline=None)
def test_the_allocation_math_never_oversubscribes(asks: list[tuple[int, int]]) -> None:
    caps = capacity.capacities(40 * GIB)
    device = {"name": "shared-gpu-x", "allowMultipleAllocations": True, "capacity": caps,
              "attributes": {"kind": {"string": "shared-gpu"}}}  # fmt: skip
    slices = [{"spec": {"pool": {"name": NODE}, "devices": [device]}}]
    alloc = Allocator(slices, classes())
    total = {"memory": Fraction(0), "computeShare": Fraction(0)}
    for i, (mib, share) in enumerate(asks):
        try:
            got = alloc.allocate(shared_claim(f"c{i}", "ns", memory=f"{mib}Mi", share=str(share)))
        except Unallocatable:
            continue
        used = {k: q(v) for k, v in got["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"].items()}
        assert used["memory"] >= mib << 20 and used["memory"] % (256 << 20) == 0 and used["computeShare"] >= share
        total = {k: total[k] + used[k] for k in total}
    assert total["memory"] <= 40960 << 20 and total["computeShare"] <= 100


# ----------------------------------------------------------------------------- prepare and unprepare
def _env(node: SharedNode, uid: str) -> set[str]:
    spec = json.loads(node.host.dra_claim_cdi_spec(uid).read_text())
    return {e for d in spec["devices"] for e in d["containerEdits"].get("env", [])}


def _one_gpu(node: SharedNode) -> tuple[Allocator, str]:
    """An allocator over the node's slices with one shared GPU offered (the others left out)."""
    docs = node.slices()
    shared = sorted(d["name"] for d in docs[0]["spec"]["devices"] if d["attributes"]["kind"]["string"] == "shared-gpu")
    keep = shared[0]
    docs[0]["spec"]["devices"] = [d for d in docs[0]["spec"]["devices"] if d["name"] == keep]
    return Allocator(docs, classes()), keep


def allocated(node: SharedNode, alloc: Allocator, name: str, ns: str, pod: str, **asks: Any) -> tuple[str, str, str]:
    """A claim allocated by the scheduler's math, reserved for ``pod`` (whose cgroup is made), in the API server."""
    pod_cgroup(node.sim, pod)
    return node.add(alloc.allocate(shared_claim(name, ns, **asks), pod_uid=pod))


def test_claims_of_several_namespaces_share_one_gpu_each_with_its_tenant_and_cap(
    node: SharedNode, qos: DaemonProc
) -> None:
    alloc, device = _one_gpu(node)
    key = capacity.qos_key(capacity.with_shared(node.driver.devices(), [device])[device])
    assert key.startswith("GPU-")
    asks = {"team-a": {"memory": "8Gi", "share": "50"}, "team-b": {"memory": "3000Mi"}, "team-c": {"share": "10"}}
    refs = {ns: allocated(node, alloc, "train", ns, f"pod-{ns}", **a) for ns, a in asks.items()}
    with pytest.raises(Unallocatable):  # 50 + 25 + 10 + 20 > 100: the scheduler, not the node, refuses it
        alloc.allocate(shared_claim("train", "team-d", share="20"))
    want = {"team-a": (50, 8 * GIB), "team-b": (25, 3072 << 20), "team-c": (10, 10 * GIB)}
    for ns, ref in refs.items():
        out = node.kubelet.prepare(ref).claims[ref[2]]
        assert out.error == "", out.error
        result = node.api.claims[ref[:2]]["status"]["allocation"]["devices"]["results"][0]
        (dev,) = out.devices
        assert (dev.device_name, dev.share_id) == (device, result["shareID"])
        tenant = f"dra-{result['shareID']}"
        got = tenants(qos, key)[tenant]
        assert (got["class"], got["share"], got["memory"]) == ("offline", *want[ns])
        assert got["target"].endswith(f"-podpod_{ns.replace('-', '_')}.slice")  # the pod's cgroup
        env = _env(node, ref[2])
        assert {f"VGPUKIT_QOS_TENANT={tenant}", f"VGPUKIT_QOS_GPU={key}", f"VGPUKIT_CUDA_MEMORY={want[ns][1]}"} <= env
        assert f"LD_PRELOAD=/{LIBRARY}" in env
        assert node.kubelet.prepare(ref).claims[ref[2]] == out  # prepared: the same answer, nothing more
    assert len(tenants(qos, key)) == 3
    b = refs["team-b"]
    gone = "dra-" + node.api.claims[b[:2]]["status"]["allocation"]["devices"]["results"][0]["shareID"]
    assert node.kubelet.unprepare(b).claims[b[2]].error == ""
    assert gone not in tenants(qos, key) and len(tenants(qos, key)) == 2  # exactly that tenant
    assert not node.host.dra_claim_record(b[2]).exists()
    node.restart()  # the records name the tenants: a restarted plugin unprepares them
    for ns in ("team-a", "team-c"):
        assert node.kubelet.unprepare(refs[ns]).claims[refs[ns][2]].error == ""
    assert tenants(qos, key) == {}


def test_the_qos_planners_rules_still_apply_and_the_claims_error_names_them(node: SharedNode, qos: DaemonProc) -> None:
    alloc, device = _one_gpu(node)
    key = capacity.qos_key(capacity.with_shared(node.driver.devices(), [device])[device])
    pod_cgroup(node.sim, "ops")
    cg = "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podops.slice"
    ops = {"class": "online", "share": 90, "cgroup": cg}
    assert qos.req(op="tenant-add", gpu=key, name="ops", tenant=ops)["ok"]  # a tenant the operator added by hand
    online = [{"opaque": {"driver": DRIVER, "parameters": {"apiVersion": "vgpukit.io/v1", "kind": "QosClassConfig",
                                                           "class": "online"}}}]  # fmt: skip
    ref = allocated(node, alloc, "serve", "web", "pod-web", share="25", config=online)
    out = node.kubelet.prepare(ref).claims[ref[2]]
    assert f"{key}: online shares add up to 115% (at most 100)" in out.error
    assert set(tenants(qos, key)) == {"ops"} and not node.host.dra_claim_record(ref[2]).exists()
    offline = allocated(node, alloc, "batch", "web", "pod-batch", share="25")  # offline: its own 100%
    assert node.kubelet.prepare(offline).claims[offline[2]].error == ""
    assert node.kubelet.unprepare(offline).claims[offline[2]].error == ""


def test_configurations_that_do_not_apply_to_a_share_are_refused(node: SharedNode, qos: DaemonProc) -> None:
    alloc, _device = _one_gpu(node)
    ts = [{"opaque": {"driver": DRIVER, "parameters": {"apiVersion": "vgpukit.io/v1", "kind": "TimeSliceConfig",
                                                       "share": 30}}}]  # fmt: skip
    ref = allocated(node, alloc, "a", "ns", "pod-a", config=ts)
    out = node.kubelet.prepare(ref).claims[ref[2]]
    assert "shared by capacity, its share and memory cap are the allocation's" in out.error
    assert not node.host.dra_claim_record(ref[2]).exists()
    doc = alloc.allocate(shared_claim("b", "ns"), pod_uid="pod-b")  # as a cluster without consumable capacity
    for r in doc["status"]["allocation"]["devices"]["results"]:
        del r["shareID"], r["consumedCapacity"]
    pod_cgroup(node.sim, "pod-b")
    out = node.kubelet.prepare(node.add(doc)).claims[doc["metadata"]["uid"]]
    assert "allocated without a share" in out.error and "DRAConsumableCapacity" in out.error
    bad = alloc.allocate(shared_claim("c", "ns"), pod_uid="pod-b")
    bad["status"]["allocation"]["devices"]["results"][0]["shareID"] = "not-a-uuid"
    out = node.kubelet.prepare(node.add(bad)).claims[bad["metadata"]["uid"]]
    assert out.error.endswith("the allocation's shareID is not a UUID") and "not-a-uuid" not in out.error


def test_a_device_is_exclusive_or_shared_never_both(node: SharedNode, qos: DaemonProc) -> None:
    from tests.k8s.test_dra_plugin import claim

    gpus = sorted(n for n, d in node.driver.devices().items() if d.kind == "gpu")
    mine, other = gpus[0], gpus[1]
    # a claim the scheduler gave gpu `mine` exclusively (before the operator shared it): it stays exclusive
    ex = node.add(claim("ex-1", "ex", mine))
    assert node.kubelet.prepare(ex).claims["ex-1"].error == ""
    names = {e["name"] for e in node.driver.publication()[0]}
    assert mine in names and capacity.shared_name(mine) not in names and capacity.shared_name(other) in names
    share = claim("sh-1", "sh", capacity.shared_name(mine))  # allocated in the moment the modes changed
    share["status"]["allocation"]["devices"]["results"][0].update(
        shareID="3d3b2f1e-0000-4000-8000-000000000001", consumedCapacity={"memory": "1Gi", "computeShare": "10"}
    )
    share["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "p"}]
    pod_cgroup(node.sim, "p")
    out = node.kubelet.prepare(node.add(share)).claims["sh-1"]
    assert f"{mine} is prepared for another claim exclusively" in out.error
    assert node.kubelet.unprepare(ex).claims["ex-1"].error == ""
    # shares of `other` prepared, then the operator turns sharing off: it stays shared until they are gone
    share["metadata"]["uid"], share["metadata"]["name"] = "sh-2", "sh-2"
    share["status"]["allocation"]["devices"]["results"][0]["device"] = capacity.shared_name(other)
    assert node.kubelet.prepare(node.add(share)).claims["sh-2"].error == ""
    node.share = "off"
    node.restart()
    names = {e["name"] for e in node.driver.publication()[0]}
    assert capacity.shared_name(other) in names and other not in names and mine in names
    assert capacity.shared_name(other) in {n for n, _s, _w in node.driver.health_report()}
    out = node.kubelet.prepare(node.add(claim("ex-2", "ex2", other))).claims["ex-2"]
    assert f"device {other}: it is shared by capacity" in out.error
    assert node.kubelet.unprepare(node.add(share)).claims["sh-2"].error == ""
    names = {e["name"] for e in node.driver.publication()[0]}
    assert other in names and not any(n.startswith("shared-") for n in names)


def test_two_shares_of_one_device_in_one_claim_are_one_tenant(node: SharedNode, qos: DaemonProc) -> None:
    alloc, device = _one_gpu(node)
    key = capacity.qos_key(capacity.with_shared(node.driver.devices(), [device])[device])
    two = shared_claim("two", "ns", share="10")
    req = two["spec"]["devices"]["requests"][0]
    two["spec"]["devices"]["requests"].append({**req, "name": "more"})
    pod_cgroup(node.sim, "pod-two")
    ref = node.add(alloc.allocate(two, pod_uid="pod-two"))
    out = node.kubelet.prepare(ref).claims[ref[2]]
    assert out.error == "" and len(out.devices) == 2 and len({d.share_id for d in out.devices}) == 2
    assert {tuple(d.cdi_device_ids) for d in out.devices} == {(f"vgpukit.io/claim={ref[2]}-{device}",)}
    (tenant,) = tenants(qos, key).values()
    assert (
        tenant["share"] == 20
        and tenant["memory"] == 20 * GIB
        and tenant["name"] == f"dra-{min(d.share_id for d in out.devices)}"
    )
    assert node.kubelet.unprepare(ref).claims[ref[2]].error == "" and tenants(qos, key) == {}


def test_the_command_shares_what_it_is_told_and_taints_with_the_effect_asked(short_tmp: Path, api: ApiServer) -> None:  # noqa: F811
    """``vgpukit k8s dra-plugin --share-by-capacity gpu --unhealthy-effect NoExecute`` as its own process."""
    from tests.k8s.test_dra_crash import Plugin as Process

    sim = shared_host(short_tmp / "h")
    _ok(sim, "sim", "fault", "xid", "gpu0", "79")  # lost before the plugin started: its memory unknown
    args = ("--share-by-capacity", "gpu", "--unhealthy-effect", "NoExecute", "--interval", "0.2")
    p = Process(sim, api.kubeconfig(short_tmp / "kc"), args=args)
    try:

        def devices() -> dict[str, Any]:
            return {d["name"]: d for s in list(api.slices.values()) for d in s["spec"].get("devices") or []}

        assert api.wait(lambda: any(n.startswith("shared-gpu-") for n in devices()), timeout=30)
        got = devices()
        lost = next(n for n, d in got.items() if d.get("taints"))
        assert lost.startswith("gpu-") and got[lost]["taints"][0]["effect"] == "NoExecute"  # exclusive: no memory
        assert not any(n.startswith("gpu-") and n != lost for n in got)  # every other GPU shared
        assert not any(n.startswith("shared-mig-") for n in got)  # MIG slices not named
    finally:
        p.close()


def test_one_gpu_has_one_memory_figure_exclusive_or_shared(short_tmp: Path, api: ApiServer) -> None:  # noqa: F811
    """A whole GPU's ``memory`` is NVML's total whichever form it is published in (it was the full-size MIG
    profile's when exclusive: a little less than its shared form's)."""
    n = SharedNode(shared_host(short_tmp / "h"), api)
    try:
        shared = {e["name"]: e for e in n.driver.publication()[0]}["shared-gpu-0000-03-00-0"]
        n.driver.capacity.choice = capacity.Choice()
        whole = {e["name"]: e for e in n.driver.publication()[0]}["gpu-0000-03-00-0"]
        assert whole["capacity"]["memory"]["value"] == str(
            int(capacity.quantity(shared["capacity"]["memory"]["value"], "m"))
        )
    finally:
        n.close()
