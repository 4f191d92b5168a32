"""KEP-5304 device metadata written by the DRA driver (``--device-metadata``): the file the kubelet-plugin
library of 1.36/1.37 writes (same host path, JSON stream, CDI mount), what KubeVirt's virt-launcher reads
out of it (tests/k8s/virtlauncher.py), the published standard attributes, and kill -9 at every change."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke, make_sim, sim_host
from tests.k8s import virtlauncher
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_crash import Plugin
from tests.k8s.test_dra_plugin import NODE, Node, _ok, api, claim, opener, unusable  # noqa: F401
from vgpukit.k8s.dra import metadata
from vgpukit.k8s.dra.devices import DRIVER, dra_devices
from vgpukit.k8s.dra.server import Driver, plugin_socket, registry_socket
from vgpukit.k8s.dra_v1 import api_pb2 as dra
from vgpukit.sriov.binding import current_driver

UID = "0c1a1m00-0000-4000-8000-000000000001".replace("m", "0")


def hgx(path: Path) -> Path:
    sim = make_sim(path)
    _ok(sim, "sriov", "enable", "nic1", "--vfs", "2")  # VFs on mlx5_core: bound to vfio-pci at prepare
    return sim


def _names(sim: Path) -> dict[str, Any]:
    _env, collect, close = opener(sim)()
    try:
        return dra_devices(collect())
    finally:
        close()


def _driver(sim: Path, doc: dict[str, Any], on: bool = True) -> Driver:
    return Driver(NODE, opener(sim), lambda *_: doc, unusable(sim), device_metadata=on)


def test_prepare_writes_the_metadata_stream_and_its_cdi_mount(tmp_path: Path) -> None:
    sim = hgx(tmp_path / "h")
    host = sim_host(sim)
    offered = _names(sim)
    vf = next(n for n, d in sorted(offered.items()) if d.kind == "vf" and d.host_driver)
    gpu = next(n for n, d in sorted(offered.items()) if d.kind == "gpu")
    doc = claim(UID, "vm1-devices-abcde", vf, gpu)
    doc["metadata"]["annotations"] = {metadata.POD_CLAIM_ANNOTATION: "devices"}
    out = _driver(sim, doc).prepare(dra.Claim(namespace="default", name="vm1-devices-abcde", uid=UID))
    assert out.error == ""
    assert [list(d.cdi_device_ids) for d in out.devices] == [
        [f"vgpukit.io/claim={UID}-{vf}", f"{DRIVER}/metadata={UID}_r0"],
        [f"vgpukit.io/claim={UID}-{gpu}", f"{DRIVER}/metadata={UID}_r1"],
    ]
    path = sim / f"var/lib/kubelet/plugins/{DRIVER}/dra-device-metadata/default_vm1-devices-abcde/r0/metadata.json"
    text = path.read_text()
    decoder, docs, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        obj, at = decoder.raw_decode(text, at)
        docs.append(obj)
        at += 1
    assert [d["apiVersion"] for d in docs] == ["metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1"]
    bdf = offered[vf].device.id
    for d in docs:
        assert d["kind"] == "DeviceMetadata" and d["podClaimName"] == "devices"
        assert d["metadata"] == {"name": "vm1-devices-abcde", "namespace": "default", "uid": UID, "generation": 1}
        (req,) = d["requests"]
        assert req["name"] == "r0" and len(req["devices"]) == 1
        dev = req["devices"][0]
        assert (dev["driver"], dev["pool"], dev["name"]) == (DRIVER, NODE, vf)
        assert dev["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": bdf}
        assert dev["attributes"]["resource.kubernetes.io/pcieRoot"]["string"].startswith("pci0000:")
    spec = json.loads((sim / f"run/cdi/{DRIVER}-metadata-{UID}-r0.json").read_text())
    assert spec["kind"] == f"{DRIVER}/metadata" and spec["devices"][0]["name"] == f"{UID}_r0"
    (mount,) = spec["devices"][0]["containerEdits"]["mounts"]
    assert mount["hostPath"] == host.display(path) and mount["options"] == ["ro", "bind"]
    assert mount["containerPath"] == (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/devices/r0/{DRIVER}-metadata.json"
    )
    assert current_driver(host, bdf) == "vfio-pci"
    # what virt-launcher makes of it: the VF as an unmanaged PCI hostdev
    vmi = {
        "spec": {
            "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": "t"}],
            "domain": {"devices": {"hostDevices": [{"name": "nic", "claimName": "devices", "requestName": "r0"}]}},
        }
    }
    (el,) = virtlauncher.from_metadata(vmi, virtlauncher.pod_view([spec], tmp_path / "pod", sim))
    assert el.get("type") == "pci" and el.get("managed") == "no"
    assert el.find("alias").get("name") == "ua-dra-hostdevice-nic"  # type: ignore[union-attr]
    assert _driver(sim, doc).unprepare(dra.Claim(namespace="default", name="vm1-devices-abcde", uid=UID)).error == ""
    assert not path.exists() and not (sim / f"run/cdi/{DRIVER}-metadata-{UID}-r0.json").exists()
    assert current_driver(host, bdf) != "vfio-pci"


def test_an_mdev_gives_virt_launcher_its_uuid(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "q", "qemu-guest")
    _ok(sim, "mdev", "create", "mtty", "mtty-1", "--uuid", "5a1c0de0-0000-4000-8000-00000000e001")
    name = "mdev-5a1c0de0-0000-4000-8000-00000000e001"
    doc = claim(UID, "c", name)
    assert _driver(sim, doc).prepare(dra.Claim(namespace="ns", name="c", uid=UID)).error == ""
    text = (sim / f"var/lib/kubelet/plugins/{DRIVER}/dra-device-metadata/ns_c/r0/metadata.json").read_text()
    attrs = json.loads(text[: text.index("\n}\n") + 2])["requests"][0]["devices"][0]["attributes"]
    assert attrs["mdevUUID"] == {"string": "5a1c0de0-0000-4000-8000-00000000e001"}
    assert "resource.kubernetes.io/pciBusID" not in attrs
    spec = json.loads((sim / f"run/cdi/{DRIVER}-metadata-{UID}-r0.json").read_text())
    base = virtlauncher.pod_view([spec], tmp_path / "pod", sim)
    vmi = {
        "spec": {
            "resourceClaims": [{"name": "c", "resourceClaimName": "c"}],
            "domain": {"devices": {"gpus": [{"name": "g", "claimName": "c", "requestName": "r0"}]}},
        }
    }
    (el,) = virtlauncher.from_metadata(vmi, base)
    assert (el.get("type"), el.get("display"), el.find("source/address").get("uuid")) == (  # type: ignore[union-attr]
        "mdev",
        "on",
        "5a1c0de0-0000-4000-8000-00000000e001",
    )


def test_without_the_flag_no_metadata_is_written(tmp_path: Path) -> None:
    sim = hgx(tmp_path / "h")
    vf = next(n for n, d in sorted(_names(sim).items()) if d.kind == "vf")
    out = _driver(sim, claim(UID, "c", vf), on=False).prepare(dra.Claim(namespace="default", name="c", uid=UID))
    assert out.error == "" and [list(d.cdi_device_ids) for d in out.devices] == [[f"vgpukit.io/claim={UID}-{vf}"]]
    assert not (sim / f"var/lib/kubelet/plugins/{DRIVER}/dra-device-metadata").exists()


def test_slices_publish_the_standard_attributes(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    _ok(sim, "sriov", "enable", "nic0", "--vfs", "1", "--driver", "vfio-pci")
    entries = {e["name"]: e["attributes"] for e in _driver(sim, {}).slice_entries()}
    vf = entries["vf-0000-05-00-2"]
    assert vf["resource.kubernetes.io/pciBusID"] == {"string": "0000:05:00.2"}
    assert vf["resource.kubernetes.io/pcieRoot"]["string"].startswith("pci")
    assert vf["resource.kubernetes.io/numaNode"] == {"int": 0}
    assert entries["gpu-0000-03-00-0"]["resource.kubernetes.io/pciBusID"] == {"string": "0000:03:00.0"}
    q = make_sim(tmp_path / "q", "qemu-guest")
    _ok(q, "mdev", "create", "mtty", "mtty-1", "--uuid", "5a1c0de0-0000-4000-8000-00000000e001")
    mdev = {e["name"]: e["attributes"] for e in _driver(q, {}).slice_entries()}[
        "mdev-5a1c0de0-0000-4000-8000-00000000e001"
    ]
    assert mdev["mdevUUID"] == {"string": "5a1c0de0-0000-4000-8000-00000000e001"}


@pytest.mark.parametrize("verb", ["prepare", "unprepare"])
def test_a_kill_at_every_change_leaves_metadata_all_or_nothing(
    verb: str,
    short_tmp: Path,
    api: ApiServer,  # noqa: F811
) -> None:
    pristine = hgx(short_tmp / "p")
    invoke(pristine, "health")
    host = sim_host(pristine)
    host.mkdir(registry_socket(host).parent)
    host.mkdir(plugin_socket(host).parent)
    vf = next(n for n, d in sorted(_names(pristine).items()) if d.kind == "vf" and d.host_driver)
    api.claims[("default", "c")] = claim("u-meta", "c", vf)
    ref = ("default", "c", "u-meta")
    kubeconfig = api.kubeconfig(short_tmp / "kubeconfig")
    points = 0
    prepared: Path | None = None  # unprepare: the host with the claim prepared, made once, copied for each kill
    for n in range(1, 60):
        sim = short_tmp / f"h{n}"
        import shutil

        if prepared is None:
            shutil.copytree(pristine, sim, symlinks=True)
        else:  # cp -a: the prepared tree holds the kubelet's sockets
            subprocess.run(["cp", "-a", str(prepared), str(sim)], check=True)
        files = [
            sim / f"var/lib/kubelet/plugins/{DRIVER}/dra-device-metadata/default_c/r0/metadata.json",
            sim / f"run/cdi/{DRIVER}-metadata-u-meta-r0.json",
            sim / "run/cdi/vgpukit.io-claim-u-meta.json",
        ]
        if verb == "unprepare" and prepared is None:
            node = Node(sim, api)
            node.driver.device_metadata = True
            try:
                assert node.kubelet.prepare(ref).claims["u-meta"].error == ""
            finally:
                node.close()
            invoke(sim, "health")
            prepared = short_tmp / "prepared"
            subprocess.run(["cp", "-a", str(sim), str(prepared)], check=True)
        if verb == "unprepare":
            assert all(f.exists() for f in files)
        p = Plugin(sim, kubeconfig, crash_at=n, args=("--device-metadata",))
        try:
            out = p.call(verb, ref)
        finally:
            p.close()
        if out is not None:
            assert out.error == ""
            break
        points += 1
        node = Node(sim, api)  # restarted: the killed run repaired at its first call
        node.driver.device_metadata = True
        try:
            if verb == "prepare" and n % 2:
                assert node.kubelet.prepare(ref).claims["u-meta"].error == ""
                assert all(f.exists() for f in files), n
            assert node.kubelet.unprepare(ref).claims["u-meta"].error == ""
            assert not any(f.exists() for f in files), n
        finally:
            node.close()
    assert points >= 3, points
