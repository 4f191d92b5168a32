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
from tests.k8s.test_dra_plugin import NODE, claim, short_tmp  # noqa: F401 (fixture)
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
    short_tmp: Path,  # noqa: F811
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
        assert dev["attributes"]["vgpuType"] == {"string": "T4-4Q"} and dev["attributes"]["kind"] == {"string": "mdev"}
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


def test_vendor_vfio_vgpus_are_not_made_on_demand(short_tmp: Path, api: ApiServer) -> None:  # noqa: F811
    node = OnDemandNode(make_sim(short_tmp / "h", "h100-vgpu"), api)
    try:
        assert not any(name.endswith("-vgpu") for name in publish(node, api))  # no CDI entry for such a VF
        out = node.kubelet.prepare(node.add(claim("u-f", "f", f"{H100}-vgpu-h100-20c-1"))).claims["u-f"]
        assert "no device gpu-0000-41-00-0-vgpu-h100-20c-1 on this node" in out.error
        assert not node.host.dra_made_record("u-f").exists()
    finally:
        node.close()
