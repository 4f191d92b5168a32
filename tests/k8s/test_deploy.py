"""deploy/kubernetes/: every manifest validates against the Kubernetes OpenAPI schemas (kubernetes-validate,
strict: unknown fields rejected), and the RBAC is the least the agent needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import invoke

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
K8S_VERSION = "1.30"  # the oldest release the manifests are written for (ValidatingAdmissionPolicy v1)


def documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        out += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _n, d in documents() if d["kind"] == kind]


@pytest.mark.parametrize(("name", "doc"), documents(), ids=lambda v: v if isinstance(v, str) else v["kind"])
@pytest.mark.parametrize("version", [K8S_VERSION, "1.37"])
def test_manifest_validates_against_the_kubernetes_schemas(name: str, doc: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


def test_a_broken_manifest_is_caught() -> None:
    (ds,) = [d for d in of_kind("DaemonSet") if d["metadata"]["name"] == "vgpukit-device-plugin"]
    bad = yaml.safe_load(yaml.safe_dump(ds))
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # a typo'd field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_rbac_is_least_privilege() -> None:
    (role,) = of_kind("ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}]
    assert not of_kind("Role") and not of_kind("RoleBinding")
    (binding,) = of_kind("ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "vgpukit-node-agent", "namespace": "vgpukit-system"}
    ]
    (policy,) = of_kind("ValidatingAdmissionPolicy")
    (pb,) = of_kind("ValidatingAdmissionPolicyBinding")
    assert pb["spec"]["policyName"] == policy["metadata"]["name"] and pb["spec"]["validationActions"] == ["Deny"]
    plugin = next(d for d in of_kind("DaemonSet") if d["metadata"]["name"] == "vgpukit-device-plugin")
    assert plugin["spec"]["template"]["spec"]["automountServiceAccountToken"] is False  # no API access at all


def _commands() -> list[list[str]]:
    out = []
    for ds in of_kind("DaemonSet"):
        spec = ds["spec"]["template"]["spec"]
        out += [c["command"] for c in spec.get("initContainers", []) + spec["containers"]]
    return out


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c[3:5]))
def test_daemonset_commands_are_vgpukit_commands(command: list[str]) -> None:
    assert command[:3] == ["vgpukit", "--root", "/host"]
    r = invoke(None, *command[3:], "--help")  # click parses every option given, then shows the help
    assert r.exit_code == 0, r.stderr


def test_fleet_configmap_names_the_file_the_agent_reads() -> None:
    (cm,) = of_kind("ConfigMap")
    agent = next(d for d in of_kind("DaemonSet") if d["metadata"]["name"] == "vgpukit-node-agent")
    spec = agent["spec"]["template"]["spec"]
    command = spec["containers"][0]["command"]
    path = Path(command[command.index("--config-file") + 1])
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "fleet")
    assert str(path.parent) == mount["mountPath"] and path.name in cm["data"]
    assert next(v for v in spec["volumes"] if v["name"] == "fleet")["configMap"]["name"] == cm["metadata"]["name"]
    fleet = yaml.safe_load(cm["data"][path.name])
    assert fleet["version"] == "vgpukit.host/v1" and "a100-vms" in fleet["configs"]


DRA = DEPLOY / "dra"
DRA_VERSION = "1.34"  # resource.k8s.io/v1 (DRA GA)


def dra_documents() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in sorted(DRA.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


@pytest.mark.parametrize(("name", "doc"), dra_documents(), ids=lambda v: v if isinstance(v, str) else v["kind"])
@pytest.mark.parametrize("version", [DRA_VERSION, "1.37"])
def test_dra_manifest_validates_against_the_kubernetes_schemas(name: str, doc: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


def test_dra_plugin_rbac_and_command() -> None:
    docs = [d for _n, d in dra_documents()]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    assert role["rules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["list", "create", "update", "delete"],
        },
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    ]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    command = ds["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["vgpukit", "--root", "/host"]
    r = invoke(None, *command[3:], "--node", "n1", "--help")
    assert r.exit_code == 0, r.stderr
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DeviceClass"}
    names = {
        "gpu.vgpukit.io",
        "mig.gpu.vgpukit.io",
        "vf.gpu.vgpukit.io",
        "mdev.gpu.vgpukit.io",
        "gpu-share.gpu.vgpukit.io",
    }
    assert set(classes) == names


def test_dra_sharing_parameters_in_the_manifests_are_what_the_driver_parses() -> None:
    """Every opaque configuration of the DRA examples and classes passes the driver's parser and its schema."""
    import json

    from jsonschema import Draft202012Validator

    from vgpukit.k8s.dra.config import configs
    from vgpukit.k8s.dra.devices import DRIVER

    schema = json.loads((Path(__file__).parents[2] / "vgpukit/data/schemas/dra/sharing-config.json").read_text())
    found = []
    for _name, doc in dra_documents():
        spec = doc.get("spec") or {}
        entries = (spec.get("spec") or {}).get("devices", {}).get("config") or spec.get("config") or []
        for e in entries:
            Draft202012Validator(schema).validate(e["opaque"]["parameters"])
            found.append(e["opaque"]["parameters"]["kind"])
        assert len(configs(entries, DRIVER).entries) == len(entries)
    assert set(found) == {"TimeSliceConfig", "MemoryCapConfig", "MpsConfig"}
