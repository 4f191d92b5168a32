"""Extended resources backed by DRA (KEP-5004): from the device plugin to the DRA plugin, a pod unchanged.

* every DeviceClass ``vgpukit k8s dra-classes`` writes (and deploy/kubernetes/dra/extended-resources.yaml
  holds) selects, among the devices the DRA plugin publishes, exactly those the device plugin hands out under
  its name on the same host;
* a pod written for the device plugin (``resources.limits``) on a DRA node: the claim the scheduler makes
  for it (tests/k8s/allocator.py, as KEP-5004 says), allocated by the allocation math, prepared by the
  plugin through the kubelet peer: one CDI device per request ``c<i>-e<j>``;
* a name is served on a node by the device plugin or by DRA, never both.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import invoke, make_sim
from tests.k8s.allocator import Allocator, extended_claim
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_deploy import DEPLOY, _runs_on, cel, dra_documents, of_kind
from tests.k8s.test_dra_capacity import LIBRARY, SharedNode, classes, pod_cgroup, tenants
from tests.k8s.test_dra_plugin import NODE, api, opener, unusable  # noqa: F401 (fixtures)
from tests.qos.conftest import DaemonProc
from vgpukit.k8s.dra import capacity
from vgpukit.k8s.dra.extended import SHARE, class_name, device_class, device_classes
from vgpukit.k8s.dra.server import Driver
from vgpukit.node.inventory import Options, collect

HOSTS = {  # profile -> the commands that make the device plugin's devices
    "hgx-a100": [("partition", "gpu1", "--mig", "3g.20gb,2g.10gb"),
                 ("partition", "gpu2", "--mig", "3g.20gb", "--ci", "1c.3g.20gb=3"),
                 ("sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci"),
                 ("sriov", "enable", "nic1", "--vfs", "1")],
    "t4-mdev": [("vgpu", "create", "gpu0", "--type", "GRID T4-4Q")],
    "h100-vgpu": [("vgpu", "create", "gpu0", "--type", "H100-20C")],
    "qemu-guest": [("mdev", "create", "mtty", "--type", "mtty-2")],
}  # fmt: skip


def host(base: Path, profile: str) -> Path:
    sim = base / profile
    assert invoke(None, "sim", "init", str(sim), "--profile", profile).exit_code == 0
    for cmd in HOSTS[profile]:
        r = invoke(sim, *cmd)
        assert r.exit_code == 0, (cmd, r.stderr)
    (sim / LIBRARY).parent.mkdir(parents=True, exist_ok=True)
    (sim / LIBRARY).write_text("a stand-in\n")
    return sim


@pytest.mark.parametrize("share", ["gpu", "off"])
@pytest.mark.parametrize("profile", sorted(HOSTS))
def test_each_class_selects_exactly_what_the_device_plugin_serves_under_its_name(
    profile: str, share: str, tmp_path: Path
) -> None:
    """Whole GPUs shared by capacity or exclusive: either way ``gpu-share`` selects the GPUs the device plugin
    shares (one of them whole where exclusive), and the class exists only where it has such GPUs."""
    sim = host(tmp_path, profile)
    env, _collect, close = opener(sim)()
    try:
        inv = collect(env.host, env.nvml, Options(replicas=2))  # the device plugin's view (2 replicas a GPU)
    finally:
        close()
    served = {
        name: {d.id.rsplit("-", 1)[0] if name == SHARE else d.id for d in devs} for name, devs in inv.resources.items()
    }
    driver = Driver(NODE, opener(sim), lambda *_: {}, unusable(sim), share=capacity.choice(share))
    entries = driver.publication()[0]
    devices = capacity.with_shared(driver.devices(), [e["name"] for e in entries])
    ident = {e["name"]: devices[e["name"]].device.id for e in entries if e["name"] in devices}
    ident.update(
        {
            e["name"]: e["attributes"]["pciBusID"]["string"]
            for e in entries
            if e["name"].startswith(("shared-gpu-", "gpu-"))
        }
    )
    made = device_classes(inv)
    assert {c["spec"]["extendedResourceName"] for c in made} == set(served)
    assert (SHARE in served) == (profile == "hgx-a100")  # GPUs the device plugin shares: not vGPU hosts
    for c in made:
        name = c["spec"]["extendedResourceName"]
        assert c["metadata"]["name"] == class_name(name) and c == device_class(name)
        (sel,) = c["spec"]["selectors"]
        match = cel(sel["cel"]["expression"])
        chosen = {ident[e["name"]] for e in entries if match(e)}
        assert chosen == served.get(name, set()), name
    if profile == "hgx-a100":  # the manifest's classes: those this host's device plugin would need, and more
        shipped = [d for _n, d in dra_documents() if d["kind"] == "DeviceClass" and "extendedResourceName" in d["spec"]]
        assert all(d == device_class(d["spec"]["extendedResourceName"]) for d in shipped)
        names = {d["spec"]["extendedResourceName"] for d in shipped}
        assert {SHARE, "vgpukit.io/mig-3g.20gb", "vgpukit.io/mig-2g.10gb"} <= names


def test_the_command_prints_the_classes_of_the_host(tmp_path: Path) -> None:
    sim = host(tmp_path, "t4-mdev")
    r = invoke(sim, "k8s", "dra-classes")
    assert r.exit_code == 0, r.stderr
    docs = list(yaml.safe_load_all(r.stdout))
    assert [d["spec"]["extendedResourceName"] for d in docs] == ["vgpukit.io/vgpu-t4-4q"]  # no GPU it shares
    assert docs[0] == device_class("vgpukit.io/vgpu-t4-4q")
    as_json = invoke(sim, "--json", "k8s", "dra-classes")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["deviceClasses"] == docs
    bare = invoke(make_sim(tmp_path / "q", "qemu-guest"), "k8s", "dra-classes")
    assert bare.exit_code == 0 and bare.stdout == "" and "no DeviceClass" in bare.stderr


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "legacy", "namespace": "ml", "uid": "pod-legacy"},
    "spec": {
        "containers": [  # as written for the device plugin: nothing about DRA
            {"name": "trainer", "image": "x", "resources": {"limits": {"vgpukit.io/mig-3g.20gb": "1", "cpu": "2"}}},
            {"name": "helper", "image": "x", "resources": {"limits": {"vgpukit.io/gpu-share": "1"}}},
            {"name": "sidecar", "image": "x"},
        ]
    },
}


def test_a_gpu_share_pod_gets_a_whole_gpu_where_gpus_are_not_shared_by_capacity(
    short_tmp: Path,
    api: ApiServer,  # noqa: F811
) -> None:
    """Without --share-by-capacity (or a cluster without DRAConsumableCapacity) a pod asking the device
    plugin's vgpukit.io/gpu-share is still served: by an exclusive whole GPU."""
    sim = host(short_tmp, "hgx-a100")
    node = SharedNode(sim, api)
    node.share = "off"
    node.restart()
    try:
        env, _c, close = opener(sim)()
        try:
            ours = device_classes(collect(env.host, env.nvml, Options(replicas=1)))
        finally:
            close()
        pod = copy.deepcopy(POD)
        claim = extended_claim(pod, ours, allocatable={})
        assert claim is not None
        pod_cgroup(sim, "pod-legacy")
        allocated = Allocator(node.slices(), [*classes(), *ours]).allocate(claim, pod_uid="pod-legacy")
        results = {r["request"]: r for r in allocated["status"]["allocation"]["devices"]["results"]}
        assert results["c1-e0"]["device"].startswith("gpu-") and "shareID" not in results["c1-e0"]
        ref = node.add(allocated)
        out = node.kubelet.prepare(ref).claims[ref[2]]
        assert out.error == "", out.error
        assert node.kubelet.unprepare(ref).claims[ref[2]].error == ""
    finally:
        node.close()


def test_a_pod_written_for_the_device_plugin_is_served_by_the_dra_plugin_unchanged(
    short_tmp: Path,
    api: ApiServer,  # noqa: F811
) -> None:
    import json

    sim = host(short_tmp, "hgx-a100")
    node = SharedNode(sim, api)
    node.share = "gpu"
    node.restart()
    qos = DaemonProc(sim, sim=True).start()
    try:
        env, _c, close = opener(sim)()
        try:
            ours = device_classes(collect(env.host, env.nvml, Options(replicas=1)))
        finally:
            close()
        pod = copy.deepcopy(POD)
        claim = extended_claim(pod, ours, allocatable={})  # a DRA node: no device plugin resources
        assert claim is not None and claim["metadata"]["annotations"] == {
            "resource.kubernetes.io/extended-resource-claim": "true"
        }
        requests = {r["name"]: r["exactly"] for r in claim["spec"]["devices"]["requests"]}
        assert requests == {
            "c0-e0": {
                "deviceClassName": class_name("vgpukit.io/mig-3g.20gb"),
                "allocationMode": "ExactCount",
                "count": 1,
            },
            "c1-e0": {"deviceClassName": class_name(SHARE), "allocationMode": "ExactCount", "count": 1},
        }
        assert pod["status"]["extendedResourceClaimStatus"]["requestMappings"][1] == {
            "containerName": "helper", "extendedResourceName": SHARE, "requestName": "c1-e0"}  # fmt: skip
        pod_cgroup(sim, "pod-legacy")
        allocated = Allocator(node.slices(), [*classes(), *ours]).allocate(claim, pod_uid="pod-legacy")
        results = {r["request"]: r for r in allocated["status"]["allocation"]["devices"]["results"]}
        assert results["c0-e0"]["device"].startswith("mig-") and results["c1-e0"]["device"].startswith("shared-gpu-")
        assert results["c1-e0"]["consumedCapacity"] == {"memory": str(10 << 30), "computeShare": "25"}  # one replica
        ref = node.add(allocated)
        out = node.kubelet.prepare(ref).claims[ref[2]]
        assert out.error == "", out.error
        by_request = {d.request_names[0]: d for d in out.devices}
        assert set(by_request) == {"c0-e0", "c1-e0"} and by_request["c1-e0"].share_id == results["c1-e0"]["shareID"]
        spec = json.loads(node.host.dra_claim_cdi_spec(ref[2]).read_text())
        mig = next(d for d in spec["devices"] if d["name"].endswith(results["c0-e0"]["device"]))
        assert any("nvidia-caps" in n["path"] for n in mig["containerEdits"]["deviceNodes"])
        key = capacity.qos_key(
            capacity.with_shared(node.driver.devices(), [results["c1-e0"]["device"]])[results["c1-e0"]["device"]]
        )
        assert f"dra-{results['c1-e0']['shareID']}" in tenants(qos, key)
        assert node.kubelet.unprepare(ref).claims[ref[2]].error == "" and tenants(qos, key) == {}
    finally:
        qos.stop()
        node.close()


@pytest.mark.parametrize(
    "labels",
    [{"vgpukit.io/node": "true"}, {"vgpukit.io/node": "true", "vgpukit.io/dra": "true"}, {}],
    ids=["device-plugin-node", "dra-node", "neither"],
)
def test_a_name_is_served_by_the_device_plugin_or_dra_never_both(labels: dict[str, str], tmp_path: Path) -> None:
    """The manifests run one plugin per node; where the device plugin runs, the node's allocatable has its
    names and the scheduler takes them from it; where the DRA plugin runs, it has none and the scheduler
    makes the claim. No node gets a name from both."""
    sim = host(tmp_path, "hgx-a100")
    env, _c, close = opener(sim)()
    try:
        inv = collect(env.host, env.nvml, Options(replicas=1))
    finally:
        close()
    dp = [d for d in of_kind("DaemonSet") if d["metadata"]["name"] == "vgpukit-device-plugin"]
    plugins = {d["metadata"]["name"] for d in dp if _runs_on(d, labels)}
    plugins |= {d["metadata"]["name"] for _n, d in dra_documents() if d["kind"] == "DaemonSet" and _runs_on(d, labels)}
    allocatable = (
        {name: str(len(devs)) for name, devs in inv.resources.items()} if "vgpukit-device-plugin" in plugins else {}
    )
    claim = extended_claim(copy.deepcopy(POD), device_classes(inv), allocatable)
    by_dra = {r["exactly"]["deviceClassName"] for r in claim["spec"]["devices"]["requests"]} if claim else set()
    by_plugin = {n for n in ("vgpukit.io/mig-3g.20gb", SHARE) if allocatable.get(n, "0") != "0"}
    assert not ({class_name(n) for n in by_plugin} & by_dra)  # never both
    if "vgpukit-dra-plugin" in plugins:
        assert by_dra == {class_name("vgpukit.io/mig-3g.20gb"), class_name(SHARE)} and not by_plugin
    if "vgpukit-device-plugin" in plugins:  # the device plugin serves both names here: no claim at all
        assert by_plugin == {"vgpukit.io/mig-3g.20gb", SHARE} and claim is None
    assert len(plugins) <= 1 and DEPLOY.is_dir()
