"""``vgpukit k8s kubevirt-config -f CR``: the patch merges this node's entries into the cluster's KubeVirt CR.

The patch is applied as the docs say, ``kubectl patch --type merge``: with the JSON merge patch of RFC 7386
written out below (a list in the patch replaces the list in the CR), and, where ``kubectl`` is installed,
with ``kubectl patch --local`` itself, which must give the same CR."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import invoke, make_sim

Applier = Callable[[dict[str, Any], dict[str, Any], Path], dict[str, Any]]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, section 2 (MergePatch): objects merge member by member, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def rfc7386(cr: dict[str, Any], patch: dict[str, Any], _tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = merge_patch(cr, patch)
    return out


def kubectl(cr: dict[str, Any], patch: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """``kubectl patch --local`` (no cluster): the CR as the API server would store it after the patch."""
    (tmp / "cr.json").write_text(json.dumps(cr))
    (tmp / "patch.yaml").write_text(yaml.safe_dump(patch))
    args = ["kubectl", "patch", "--local", "-f", str(tmp / "cr.json"), "--type", "merge"]
    out = subprocess.run(
        [*args, "--patch-file", str(tmp / "patch.yaml"), "-o", "json"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


APPLIERS = [rfc7386] + ([kubectl] if shutil.which("kubectl") else [])  # kubectl: collected where installed

QAT = {"pciVendorSelector": "8086:4940", "resourceName": "intel.com/qat"}
T4_KUBEVIRT = {"mdevNameSelector": "GRID T4-4Q", "resourceName": "nvidia.com/GRID_T4-4Q"}  # KubeVirt's own plugin


def _cr(pci: list[dict[str, Any]] | None = None, mdev: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    permitted: dict[str, Any] = {}
    if pci is not None:
        permitted["pciHostDevices"] = pci
    if mdev is not None:
        permitted["mediatedDevices"] = mdev
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt", "resourceVersion": "4711"},
        "spec": {"configuration": {"permittedHostDevices": permitted, "developerConfiguration": {"featureGates": []}}},
    }


def _conf(configuration: dict[str, Any]) -> dict[str, Any]:
    """A CR whose configuration has these keys (replacing what :func:`_cr` gives)."""
    out: dict[str, Any] = merge_patch(_cr(), {"spec": {"configuration": configuration}})
    return out


def _patch(sim: Path, cr: dict[str, Any], tmp: Path, *extra: str) -> tuple[dict[str, Any], list[str]]:
    """The node's patch (first document of the output) and its warnings, the CR given by stdin."""
    r = invoke(sim, "k8s", "kubevirt-config", "-f", "-", *extra, stdin=yaml.safe_dump(cr))
    assert r.exit_code == 0, r.stderr
    patch = next(yaml.safe_load_all(r.stdout))
    return patch, [line for line in r.stderr.splitlines() if line]


def _entries(cr: dict[str, Any], key: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = cr["spec"]["configuration"]["permittedHostDevices"].get(key, [])
    return out


def _t4(tmp: Path) -> Path:
    sim = make_sim(tmp / "t4", "t4-mdev")
    assert invoke(sim, "vgpu", "create", "gpu0", "--type", "T4-4Q").exit_code == 0
    return sim


def _hgx(tmp: Path) -> Path:
    sim = make_sim(tmp / "hgx", "hgx-a100")
    assert invoke(sim, "bind", "gpu2", "--driver", "vfio-pci").exit_code == 0
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci").exit_code == 0
    return sim


@pytest.mark.parametrize("apply", APPLIERS, ids=[a.__name__ for a in APPLIERS])
def test_the_patch_keeps_every_entry_the_cr_has(tmp_path: Path, apply: Applier) -> None:
    sim = _t4(tmp_path)
    cr = _cr(pci=[QAT], mdev=[T4_KUBEVIRT])
    patch, warnings = _patch(sim, cr, tmp_path)
    after = apply(cr, patch, tmp_path)
    assert _entries(after, "pciHostDevices") == [QAT]
    mdevs = _entries(after, "mediatedDevices")
    assert mdevs[0] == T4_KUBEVIRT  # kept as it was, in its place
    ours = {e["mdevNameSelector"]: e for e in mdevs[1:]}
    assert ours["GRID T4-4Q"] == {
        "mdevNameSelector": "GRID T4-4Q",
        "resourceName": "vgpukit.io/vm-vgpu-t4-4q",
        "externalResourceProvider": True,
    }
    assert len(ours) == len(mdevs) - 1  # every type the T4 offers, once
    assert after["spec"]["configuration"]["developerConfiguration"] == {"featureGates": []}  # the rest untouched
    assert after["metadata"]["resourceVersion"] == "4711"  # the API server's precondition: 409 if the CR changed
    (clash,) = [w for w in warnings if "mediatedDevices[0]" in w]
    assert "KubeVirt's own device plugin" in clash and "handed out twice" in clash
    assert "nvidia.com" not in clash  # the CR's text is not quoted, only this node's names


@pytest.mark.parametrize("apply", APPLIERS, ids=[a.__name__ for a in APPLIERS])
def test_several_nodes_one_after_the_other(tmp_path: Path, apply: Applier) -> None:
    a, b = _hgx(tmp_path), _t4(tmp_path)
    cr = _cr(pci=[QAT])
    patch_a, _ = _patch(a, cr, tmp_path)
    cr = apply(cr, patch_a, tmp_path)
    patch_b, _ = _patch(b, cr, tmp_path)
    cr = apply(cr, patch_b, tmp_path)
    names = {e["resourceName"] for e in _entries(cr, "pciHostDevices")}
    assert names == {"intel.com/qat", "vgpukit.io/vm-pci-10de-20b0", "vgpukit.io/vm-pci-15b3-101c"}
    assert "vgpukit.io/vm-vgpu-t4-4q" in {e["resourceName"] for e in _entries(cr, "mediatedDevices")}
    again, warnings = _patch(a, cr, tmp_path)  # node A once more: nothing new, nothing lost
    assert apply(cr, again, tmp_path) == cr and warnings == []


def test_the_same_name_for_another_selector_and_an_external_provider_are_warned(tmp_path: Path) -> None:
    sim = _hgx(tmp_path)
    other = {"pciVendorSelector": "10de:20b0", "resourceName": "nvidia.com/GA100", "externalResourceProvider": True}
    named = {"pciVendorSelector": "10de:2236", "resourceName": "vgpukit.io/vm-pci-15b3-101c"}
    mine = {"pciVendorSelector": "10DE:20B0", "resourceName": "vgpukit.io/vm-pci-10de-20b0"}  # KubeVirt's plugin
    patch, warnings = _patch(sim, _cr(pci=[other, named, mine]), tmp_path)
    assert len(warnings) == 3
    by_place = {i: next(w for w in warnings if f"pciHostDevices[{i}]" in w) for i in range(3)}
    assert "another device plugin" in by_place[0]
    assert "another selector" in by_place[1]
    assert "without externalResourceProvider" in by_place[2]
    lists = patch["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]
    assert lists[:3] == [other, named, mine] and len(lists) == 4  # 15b3:101c added; 10de:20b0's name is there


def test_a_list_from_kubectl_get_and_the_patch_only(tmp_path: Path) -> None:
    sim = _t4(tmp_path)
    listing = {"apiVersion": "v1", "kind": "List", "items": [_cr(mdev=[T4_KUBEVIRT])], "metadata": {}}
    r = invoke(sim, "k8s", "kubevirt-config", "-f", "-", "--patch-only", stdin=yaml.safe_dump(listing))
    assert r.exit_code == 0, r.stderr
    (patch,) = list(yaml.safe_load_all(r.stdout))
    assert _entries(patch, "mediatedDevices")[0] == T4_KUBEVIRT
    assert "mediatedDevices[0]" in r.stderr


def test_without_a_cr_the_patch_says_it_replaces(tmp_path: Path) -> None:
    r = invoke(_t4(tmp_path), "k8s", "kubevirt-config")
    assert r.exit_code == 0
    assert "no KubeVirt CR given (-f)" in r.stderr and "REPLACES the CR's lists" in r.stdout


@pytest.mark.parametrize(
    "text",
    [
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
        "[1, 2]\n",
        "::: bad\n",
        "",
        "apiVersion: v1\nkind: List\nitems: []\n",
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [_cr(), _cr()]}),
        yaml.safe_dump({"spec": {"configuration": {}}}),  # a fragment: no kind
        yaml.safe_dump(_conf({"mediatedDevicesConfiguration": {"mediatedDeviceTypes": 5}})),
        yaml.safe_dump(_conf({"permittedHostDevices": {"pciHostDevices": [{"resourceName": "x"}]}})),
        yaml.safe_dump(_conf({"permittedHostDevices": [1]})),
        "spec: [\n",
    ],
)
def test_input_that_is_not_a_kubevirt_cr_is_refused(tmp_path: Path, text: str) -> None:
    sim = make_sim(tmp_path / "h", "t4-mdev")
    r = invoke(sim, "k8s", "kubevirt-config", "-f", "-", stdin=text)
    assert r.exit_code == 2, r.output
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""
    path = tmp_path / "cr.yaml"
    path.write_text(text)
    assert invoke(sim, "k8s", "kubevirt-config", "-f", str(path)).exit_code == 2


@pytest.mark.parametrize(
    ("profile", "setup", "dra"),
    [
        ("qemu-guest", [("sriov", "enable", "0000:00:02.0", "--vfs", "1"), ("mdev", "create", "mtty", "mtty-1")],
         {"vm-dra-vf", "vm-dra-mdev"}),
        ("t4-mdev", [], {"vm-dra-vgpu"}),
        ("hgx-a100", [("bind", "gpu2", "--driver", "vfio-pci")], set()),
    ],
)  # fmt: skip
def test_dra_examples_follow_what_the_node_has(tmp_path: Path, profile: str, setup: list[Any], dra: set[str]) -> None:
    sim = make_sim(tmp_path / "h", profile)
    for args in setup:
        assert invoke(sim, *args).exit_code == 0
    r = invoke(sim, "k8s", "kubevirt-config")
    assert r.exit_code == 0
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    names = {d["metadata"]["name"] for d in docs if d.get("kind") == "VirtualMachineInstance"}
    assert {n for n in names if n.startswith("vm-dra-")} == dra
