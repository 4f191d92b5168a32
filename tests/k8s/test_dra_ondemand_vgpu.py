"""vGPUs made on demand by the DRA plugin: an mdev (legacy vGPU) or a VF's vGPU type (vendor VFIO),
published with the GPU's framebuffer counter, created at prepare and removed at unprepare."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate
import pytest

from tests.conftest import invoke, make_sim
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_ondemand import OnDemandNode, gathered, publish
from tests.k8s.test_dra_plugin import NODE, claim
from vgpukit.k8s.dra.slices import slice_name

T4 = "gpu-0000-3b-00-0"
H100 = "gpu-0000-41-00-0"


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE)
    yield server
    server.close()


def mdevs(node: OnDemandNode) -> list[str]:
    return sorted(node.host.listdir(node.host.mdev_devices()))


def test_a_legacy_vgpu_is_published_created_at_prepare_and_removed_at_unprepare(
    short_tmp: Path,
    api: ApiServer,
) -> None:
    sim = make_sim(short_tmp / "t", "t4-mdev")
    assert invoke(sim, "vgpu", "create", "gpu1", "--type", "T4-8Q").exit_code == 0  # an operator's: 8 GiB
    node = OnDemandNode(sim, api)
    try:
        slices = publish(node, api)
        for doc in slices.values():
            clean = {k: v for k, v in doc.items() if k != "metadata"} | {"metadata": {"name": doc["metadata"]["name"]}}
            kubernetes_validate.validate(clean, api.release, strict=True)
        sets, devices = gathered(slices)
        assert sets[f"{T4}-vgpu"] == {"name": f"{T4}-vgpu", "counters": {"framebuffer": {"value": str(16 << 30)}}}
        other = sets["gpu-0000-d8-00-0-vgpu"]
        assert other["counters"]["framebuffer"] == {"value": str(8 << 30)}  # the operator's T4-8Q uses half
        assert f"{slice_name(NODE)}-{T4}-vgpu" in slices and f"{slice_name(NODE)}-counters" in slices  # 1.37's layout
        dev = devices[f"{T4}-vgpu-t4-4q-3"]
        assert dev["attributes"]["vgpuType"] == {"string": "t4-4q"} and dev["attributes"]["kind"] == {"string": "mdev"}
        assert dev["consumesCounters"][0]["counters"] == {"framebuffer": {"value": str(4 << 30)}}
        before = mdevs(node)
        ref = node.add(claim("u-v", "v", f"{T4}-vgpu-t4-4q-3"))
        first = node.kubelet.prepare(ref).claims["u-v"]
        assert first.error == "", first.error
        (new,) = set(mdevs(node)) - set(before)
        made = json.loads(node.host.dra_made_record("u-v").read_text())["made"]
        assert made[0]["id"] == new and made[0]["type"] == "nvidia-232"
        spec = json.loads(node.files("u-v")[0].read_text())
        nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
        assert any(p.startswith("/dev/vfio/") for p in nodes)
        assert node.kubelet.prepare(ref).claims["u-v"] == first and mdevs(node) == sorted([*before, new])
        static = {d["name"] for d in publish(node, api)[slice_name(NODE)]["spec"]["devices"]}
        assert f"mdev-{new}" not in static  # the claim's, not offered again
        held = invoke(sim, "sim", "hold", new, "--vm", "guest1", "--json")
        assert held.exit_code == 0, held.stderr
        refused = node.kubelet.unprepare(ref).claims["u-v"].error
        assert "in use" in refused and new in mdevs(node), refused  # the mdev planner's rule: nothing removed
        assert invoke(sim, "sim", "release", str(json.loads(held.stdout)["pid"])).exit_code == 0
        assert node.kubelet.unprepare(ref).claims["u-v"].error == ""
        assert mdevs(node) == before and not node.host.dra_made_record("u-v").exists()
        assert not any(p.exists() for p in node.files("u-v"))
    finally:
        node.close()


def test_vendor_vfio_vgpus_are_not_made_on_demand(short_tmp: Path, api: ApiServer) -> None:
    node = OnDemandNode(make_sim(short_tmp / "h", "h100-vgpu"), api)
    try:
        assert not any(name.endswith("-vgpu") for name in publish(node, api))  # no CDI entry for such a VF
        out = node.kubelet.prepare(node.add(claim("u-f", "f", f"{H100}-vgpu-h100-20c-1"))).claims["u-f"]
        assert "no device gpu-0000-41-00-0-vgpu-h100-20c-1 on this node" in out.error
        assert not node.host.dra_made_record("u-f").exists()
    finally:
        node.close()


SAME = ("kind", "vgpuType", "vgpuTypeID", "parentBusID", "productName", "pcieRoot", "numaNode",
        "resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode")  # fmt: skip


def test_existing_and_on_demand_vgpus_have_one_vocabulary_on_every_profile(tmp_path: Path) -> None:
    """On every simulated profile that makes vGPUs on demand, an existing vGPU and one made on demand of the
    same type on the same GPU carry the same attributes (the device plugin's ``vgpuType``, NVML's product
    name, the NUMA node...), so the example claim and the migration's mapping select both."""
    from tests.k8s.test_deploy import cel, dra_documents
    from tests.k8s.test_dra_plugin import opener, unusable
    from vgpukit.k8s.dra.server import Driver
    from vgpukit.sim.build import builtin_profiles

    (example,) = [d for _n, d in dra_documents() if d["metadata"]["name"] == "vgpu-t4-4q"]
    (request,) = example["spec"]["spec"]["devices"]["requests"]
    (vgpu_class,) = [d for _n, d in dra_documents() if d["metadata"]["name"] == "vgpu.gpu.vgpukit.io"]
    selectors = [cel(s["cel"]["expression"]) for s in vgpu_class["spec"]["selectors"]]
    compared = set()
    for profile in sorted(builtin_profiles()):
        sim = make_sim(tmp_path / profile, profile)
        driver = Driver(NODE, opener(sim), lambda *_: {}, unusable(sim), "on")
        parts = driver.publication()[1]
        offered = [d for p in parts.values() for d in p["devices"] if "vgpuType" in d["attributes"]]
        if not offered:
            continue
        first = offered[0]["attributes"]
        gpu, label = first["parentBusID"]["string"], first["vgpuType"]["string"]
        made = invoke(sim, "vgpu", "create", gpu, "--type", label.upper(), "--json")
        assert made.exit_code == 0, made.stderr
        entries, parts = driver.publication()
        (existing,) = [e for e in entries if e["attributes"].get("vgpuType") == {"string": label}]
        on_demand = [d for p in parts.values() for d in p["devices"] if d["attributes"]["vgpuType"]["string"] == label]
        assert on_demand, profile
        for dev in on_demand:
            if dev["attributes"]["parentBusID"] != existing["attributes"]["parentBusID"]:
                continue
            assert {k: dev["attributes"].get(k) for k in SAME} == {k: existing["attributes"].get(k) for k in SAME}
            # the mdev's own ids, and the device plugin's name (it hands out existing vGPUs only: KEP-5004's classes)
            assert set(existing["attributes"]) - set(dev["attributes"]) == {"uuid", "mdevUUID", "devicePluginResource"}
            assert set(dev["attributes"]) - set(existing["attributes"]) == {"onDemand"}
            assert all(m(dev) for m in selectors)
            compared.add(profile)
        if label == "t4-4q":
            asked = [cel(s["cel"]["expression"]) for s in request["exactly"]["selectors"]]
            assert all(m(d) for m in asked for d in [existing, *on_demand])
    assert "t4-mdev" in compared


def test_on_demand_vgpus_are_offered_only_where_the_host_can_still_make_them(
    short_tmp: Path,
    api: ApiServer,
) -> None:
    """Once a GPU holds a vGPU of one type the legacy driver makes no other type on it (0 available): its
    other types are not offered; of the type it holds, what the host can still make, and the devices claims
    made (allocated) stay."""
    sim = make_sim(short_tmp / "t", "t4-mdev")
    assert invoke(sim, "vgpu", "create", "gpu0", "--type", "T4-4Q").exit_code == 0  # 1 of 4 T4-4Q
    node = OnDemandNode(sim, api)
    try:
        _sets, devices = gathered(publish(node, api))
        mine = sorted(n for n in devices if n.startswith(f"{T4}-vgpu-"))
        assert mine == [f"{T4}-vgpu-t4-4q-{k}" for k in range(3)]  # 3 more T4-4Q, no other type
        other = [n for n in devices if n.startswith("gpu-0000-d8-00-0-vgpu-")]
        assert {n.rsplit("-", 1)[0] for n in other} > {"gpu-0000-d8-00-0-vgpu-t4-4q", "gpu-0000-d8-00-0-vgpu-t4-8q"}
        ref = node.add(claim("u-v", "v", f"{T4}-vgpu-t4-4q-2"))
        assert node.kubelet.prepare(ref).claims["u-v"].error == ""
        _sets, devices = gathered(publish(node, api))
        mine = sorted(n for n in devices if n.startswith(f"{T4}-vgpu-"))
        assert mine == [f"{T4}-vgpu-t4-4q-{k}" for k in range(3)]  # the claim's (-2) and the 2 the host can make
    finally:
        node.close()
