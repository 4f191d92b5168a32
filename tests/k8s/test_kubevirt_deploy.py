"""deploy/kubernetes/kubevirt/ and ``vgpukit k8s kubevirt-config``'s output validate: KubeVirt's kinds
against KubeVirt's own CRD schemas (v1.9.0, tests/data/kubevirt/: strict, an unknown field is an error),
the Kubernetes kinds against the Kubernetes OpenAPI schemas (kubernetes-validate, strict)."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.conftest import invoke, make_sim

from .test_deploy import manifests

HERE = Path(__file__).resolve().parents[2]
DEPLOY = HERE / "deploy" / "kubernetes" / "kubevirt"
SCHEMAS = HERE / "tests" / "data" / "kubevirt" / "crd-schemas-v1.9.0.json"
CRD = {"KubeVirt": "kubevirt", "VirtualMachineInstance": "virtualmachineinstance"}


def _strict(schema: Any) -> Any:
    """An object schema with properties refuses other keys (what `kubectl --validate=strict` does)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def _validator(kind: str) -> jsonschema.Draft7Validator:
    schema = _strict(json.loads(SCHEMAS.read_text())[CRD[kind]])
    return jsonschema.Draft7Validator(schema)


def validate(doc: dict[str, Any]) -> None:
    if doc.get("apiVersion") == "kubevirt.io/v1":
        _validator(doc["kind"]).validate(doc)
    else:
        kubernetes_validate.validate(doc, "1.37", strict=True)


def documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in manifests(DEPLOY):
        out += [
            (f"{path.name}:{d['kind']}:{d['metadata']['name']}", d) for d in yaml.safe_load_all(path.read_text()) if d
        ]
    return out


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[n for n, _ in documents()])
def test_manifest_validates(name: str, doc: dict[str, Any]) -> None:
    validate(doc)


def test_a_broken_vmi_or_patch_is_caught() -> None:
    vmi = copy.deepcopy(next(d for _n, d in documents() if d["kind"] == "VirtualMachineInstance"))
    vmi["spec"]["domain"]["devices"]["hostDevices"][0]["devicename"] = "x"  # a typo'd field
    with pytest.raises(jsonschema.ValidationError):
        validate(vmi)
    cr = copy.deepcopy(next(d for _n, d in documents() if d["kind"] == "KubeVirt"))
    del cr["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"][0]["resourceName"]  # required
    with pytest.raises(jsonschema.ValidationError):
        validate(cr)


def test_daemonset_command_is_a_vgpukit_command() -> None:
    (ds,) = [d for _n, d in documents() if d["kind"] == "DaemonSet"]
    command = ds["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["vgpukit", "--root", "/host"] and "--kubevirt" in command
    assert invoke(None, *command[3:], "--help").exit_code == 0


@pytest.mark.parametrize("profile", ["qemu-guest", "t4-mdev", "hgx-a100"])
def test_kubevirt_config_output_validates(tmp_path: Path, profile: str) -> None:
    sim = make_sim(tmp_path / "h", profile)
    setup = {
        "qemu-guest": [
            ("sriov", "enable", "0000:00:02.0", "--vfs", "2", "--driver", "vfio-pci"),
            ("mdev", "create", "mtty", "mtty-1"),
        ],
        "t4-mdev": [("vgpu", "create", "gpu0", "--type", "T4-4Q")],
        "hgx-a100": [
            ("bind", "gpu2", "--driver", "vfio-pci"),
            ("sriov", "enable", "nic0", "--vfs", "1", "--driver", "vfio-pci"),
        ],
    }[profile]
    for args in setup:
        assert invoke(sim, *args).exit_code == 0
    r = invoke(sim, "k8s", "kubevirt-config")
    assert r.exit_code == 0, r.stderr
    docs = list(yaml.safe_load_all(r.stdout))
    patch = docs[0]
    cr = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt"}, **patch}
    validate(cr)
    for d in docs[1:]:
        validate(d)
    permitted = patch["spec"]["configuration"]["permittedHostDevices"]
    entries = permitted.get("pciHostDevices", []) + permitted.get("mediatedDevices", [])
    assert entries and all(e["externalResourceProvider"] is True for e in entries)
    kinds = {d["metadata"]["name"] for d in docs[1:] if d["kind"] == "VirtualMachineInstance"}
    assert {"qemu-guest": {"vm-dra-vf", "vm-dra-mdev"}, "t4-mdev": {"vm-dra-vgpu"}, "hgx-a100": {"vm-dra-vf"}}[
        profile
    ] == {k for k in kinds if k.startswith("vm-dra-")}
    assert {"qemu-guest": "vm-vf", "t4-mdev": "vm-vgpu", "hgx-a100": "vm-gpu"}[profile] in kinds
    if profile == "qemu-guest":  # every type the parent offers: KubeVirt keeps the mdevs of listed types only
        assert {e["mdevNameSelector"] for e in permitted["mediatedDevices"]} == {
            "Single port serial",
            "Dual port serial",
        }


def test_kubevirt_config_warns_where_kubevirt_would_make_mdevs(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "t4-mdev")
    cr = tmp_path / "kubevirt.yaml"
    conf = {"mediatedDevicesConfiguration": {"mediatedDeviceTypes": ["GRID_T4-4Q", "nvidia-999"]}}
    cr.write_text(yaml.safe_dump({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "spec": {"configuration": conf}}))
    r = invoke(sim, "k8s", "kubevirt-config", "-f", str(cr))
    assert r.exit_code == 0, r.stderr
    assert "KubeVirt's mediatedDeviceTypes would create 'GRID T4-4Q' mdevs on this node" in r.stderr
    assert "nvidia-999" not in r.stderr
    conf["mediatedDevicesConfiguration"]["enabled"] = False  # type: ignore[index]
    cr.write_text(yaml.safe_dump({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "spec": {"configuration": conf}}))
    assert "would create" not in invoke(sim, "k8s", "kubevirt-config", "-f", str(cr)).stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [\n")
    r = invoke(sim, "k8s", "kubevirt-config", "-f", str(bad))
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
