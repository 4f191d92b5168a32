"""deploy/kubernetes/: every manifest validates against the Kubernetes OpenAPI schemas (kubernetes-validate,
strict: unknown fields rejected), and the RBAC is the least the agent needs."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import invoke
from vgpukit.k8s.dra.devices import DRIVER as DRIVER_NAME

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
K8S_VERSION = "1.30"  # the oldest release the manifests are written for (ValidatingAdmissionPolicy v1)


def manifests(directory: Path) -> list[Path]:
    """The Kubernetes objects' files of a directory (its kustomization is kustomize's: test_deploy_order.py)."""
    return [p for p in sorted(directory.glob("*.yaml")) if p.name != "kustomization.yaml"]


def documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in manifests(DEPLOY):
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
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},  # the remediation policy's events
    ]
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


def dra_documents(examples: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """The DRA manifests of ``deploy/kubernetes/dra/`` and, ``examples``, the example claims and pod of
    ``dra/examples/`` (applied on their own)."""
    paths = [*manifests(DRA), *(sorted((DRA / "examples").glob("*.yaml")) if examples else [])]
    return [(p.name, d) for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


INSTALL = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "DeviceClass"}


def test_applying_the_dra_directory_installs_the_plugin_and_runs_nothing() -> None:
    """What the first step of the migration applies (``kubectl apply -k deploy/kubernetes/dra/``, then
    ``-f dra/extended-resources.yaml``): the plugin, its RBAC and the DeviceClasses, in vgpukit-system or
    cluster-scoped; no workload, no claim template in a user's namespace, no maintenance rule (they are
    in examples/ and maintenance/, which neither names)."""
    listed = yaml.safe_load((DRA / "kustomization.yaml").read_text())["resources"]
    paths = [DRA / r for r in listed] + [DRA / "extended-resources.yaml"]
    docs = [(p.name, d) for p in paths for d in yaml.safe_load_all(p.read_text()) if d]
    assert {d["kind"] for _n, d in docs} == INSTALL
    assert all(d["metadata"].get("namespace") in (None, "vgpukit-system") for _n, d in docs)
    (ds,) = [d for _n, d in docs if d["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"vgpukit.io/node": "true", "vgpukit.io/dra": "true"}
    assert {d["kind"] for _n, d in dra_documents(examples=False)} == INSTALL  # the directory itself: no workload
    example_kinds = {d["kind"] for _n, d in dra_documents() if (_n, d) not in docs}
    assert example_kinds == {"ResourceClaimTemplate", "Pod"}


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


# ---- the DeviceClasses' and example claims' CEL against the devices the plugin publishes
# No CEL library is in the environment: the subset these manifests use (==, in, &&, ||, !, has() on
# this driver's attributes, true/false) is translated to a Python expression whose syntax tree is checked node by
# node; anything outside the subset fails here (then add a CEL library rather than widen this). A
# missing attribute read without has() raises, as CEL's "no such key" does (the allocation fails).
DOMAIN = 'device.attributes["gpu.vgpukit.io"]'
ALLOWED = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.Compare, ast.Eq, ast.NotEq,
           ast.In, ast.NotIn, ast.Name, ast.Constant, ast.List, ast.Subscript, ast.Load)  # fmt: skip


def cel(expression: str) -> Callable[[dict[str, Any]], bool]:
    e = expression.replace("device.driver", "DRIVER")
    e = re.sub(r"!has\(" + re.escape(DOMAIN) + r"\.(\w+)\)", r'("\1" not in A)', e)
    e = re.sub(r"has\(" + re.escape(DOMAIN) + r"\.(\w+)\)", r'("\1" in A)', e)
    e = re.sub(re.escape(DOMAIN) + r"\.(\w+)", r'A["\1"]', e)
    e = e.replace("&&", " and ").replace("||", " or ")
    e = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", e))  # CEL's bool literals
    tree = ast.parse(e, mode="eval")
    bad = [type(n).__name__ for n in ast.walk(tree) if not isinstance(n, ALLOWED)]
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not bad and names <= {"DRIVER", "A"}, (expression, bad, names)
    code = compile(tree, "<cel>", "eval")

    def match(entry: dict[str, Any]) -> bool:
        attrs = {k: next(iter(v.values())) for k, v in entry["attributes"].items()}
        return bool(eval(code, {"__builtins__": {}}, {"DRIVER": DRIVER_NAME, "A": attrs}))

    return match


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every static kind as published: hgx-a100 (GPUs, a MIG slice, a VF on vfio-pci, a VF on
    mlx5_core), qemu-guest (an mtty mdev), t4-mdev (a GRID T4-4Q vGPU), and the same hgx-a100 host's GPUs
    and MIG slice shared by capacity (``shared/``); by ``<host>/<device>``."""
    from vgpukit.k8s.dra.capacity import choice
    from vgpukit.k8s.dra.server import Driver

    from .test_dra_plugin import opener, unusable

    base = tmp_path_factory.mktemp("dra-cel")
    setups = {
        "hgx-a100": [("partition", "gpu1", "--mig", "3g.20gb"), ("sriov", "enable", "nic0", "--vfs", "1",
                     "--driver", "vfio-pci"), ("sriov", "enable", "nic1", "--vfs", "1")],
        "qemu-guest": [("mdev", "create", "mtty", "--type", "mtty-2")],
        "t4-mdev": [("vgpu", "create", "gpu0", "--type", "GRID T4-4Q")],
    }  # fmt: skip
    out = {}
    for profile, commands in setups.items():
        sim = base / profile
        assert invoke(None, "sim", "init", str(sim), "--profile", profile).exit_code == 0
        for cmd in commands:
            assert invoke(sim, *cmd).exit_code == 0, cmd
        driver = Driver("n1", opener(sim), lambda *_: {}, unusable(sim), partitionable="on")
        entries, parts = driver.publication()  # static devices, and those made on demand (MIG, vGPU)
        entries += [e for part in parts.values() for e in part.get("devices", [])]
        out.update({f"{profile}/{e['name']}": e for e in entries})
    library = base / "hgx-a100" / "usr/lib/vgpukit/libvgpukit-cuda.so"
    library.parent.mkdir(parents=True, exist_ok=True)
    library.write_text("a stand-in\n")  # shared devices need the CUDA library: its memory cap
    sim = base / "hgx-a100"
    driver = Driver("n1", opener(sim), lambda *_: {}, unusable(sim), share=choice("gpu,mig"))
    out.update({f"shared/{e['name']}": e for e in driver.publication()[0] if e["name"].startswith("shared-")})
    return out


def claim_classes() -> list[dict[str, Any]]:
    """The DeviceClasses claims name (the extended-resource ones, for pods' limits: test_dra_extended.py)."""
    docs = [d for _n, d in dra_documents() if d["kind"] == "DeviceClass"]
    return [d for d in docs if "extendedResourceName" not in d["spec"]]


def _class_of(entry: dict[str, Any]) -> str:
    a = entry["attributes"]
    return "vgpu" if "vgpuType" in a else a["kind"]["string"]


def test_every_deviceclass_selects_its_kind_of_the_published_devices(published: dict[str, dict[str, Any]]) -> None:
    classes = {d["metadata"]["name"]: d for d in claim_classes()}
    wanted = {"gpu": {"gpu"}, "mig": {"mig"}, "vf": {"vf"}, "mdev": {"mdev"}, "vgpu": {"vgpu"}}
    wanted["gpu-share"] = {"gpu", "mig"}
    wanted["shared"] = {"shared-gpu", "shared-mig"}
    assert set(classes) == {f"{k}.gpu.vgpukit.io" if k != "gpu" else "gpu.vgpukit.io" for k in wanted}
    assert {_class_of(e) for e in published.values()} == {
        "gpu",
        "mig",
        "vf",
        "mdev",
        "vgpu",
        "shared-gpu",
        "shared-mig",
    }
    for short, kinds in wanted.items():
        doc = classes["gpu.vgpukit.io" if short == "gpu" else f"{short}.gpu.vgpukit.io"]
        (sel,) = doc["spec"]["selectors"]
        assert sel["cel"]["expression"].startswith(f'device.driver == "{DRIVER_NAME}" && ')
        match = cel(sel["cel"]["expression"])
        chosen = {_class_of(e) for e in published.values() if match(e)}
        assert chosen == kinds, (short, chosen)
    share = classes["gpu-share.gpu.vgpukit.io"]["spec"]["config"]
    assert [c["opaque"]["driver"] for c in share] == [DRIVER_NAME]


def test_example_claims_name_published_attributes_and_find_a_device(published: dict[str, dict[str, Any]]) -> None:
    classes = {d["metadata"]["name"]: d for d in claim_classes()}
    attributes = {k for e in published.values() for k in e["attributes"]}
    templates = [d for _n, d in dra_documents() if d["kind"] == "ResourceClaimTemplate"]
    used = set()
    for t in templates:
        devices = t["spec"]["spec"]["devices"]
        for req in devices["requests"]:
            ask = req["exactly"]
            used.add(ask["deviceClassName"])
            exprs = [s["cel"]["expression"] for s in classes[ask["deviceClassName"]]["spec"]["selectors"]]
            exprs += [s["cel"]["expression"] for s in ask.get("selectors", [])]
            assert set(re.findall(re.escape(DOMAIN) + r"\.(\w+)", " ".join(exprs))) <= attributes
            matches = [cel(x) for x in exprs]
            found = [n for n, e in published.items() if all(m(e) for m in matches)]
            assert found, t["metadata"]["name"]
        for c in devices.get("constraints", []):
            domain, _, name = c["matchAttribute"].partition("/")
            assert domain == DRIVER_NAME and name in attributes
    assert used == set(classes)  # one example per class


def _runs_on(ds: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a DaemonSet's pod goes to a node with these labels (nodeSelector and required node
    affinity with In / NotIn, the forms the manifests use)."""
    spec = ds["spec"]["template"]["spec"]
    if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
        return False
    required = spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    ops = {"In": lambda v, vs: v in vs, "NotIn": lambda v, vs: v not in vs}
    return any(
        all(ops[e["operator"]](labels.get(e["key"]), e["values"]) for e in term["matchExpressions"])
        for term in required["nodeSelectorTerms"]
    )


@pytest.mark.parametrize(
    ("labels", "serving"),
    [
        ({}, set()),
        ({"vgpukit.io/node": "true"}, {"vgpukit-device-plugin"}),
        ({"vgpukit.io/node": "true", "vgpukit.io/dra": "true"}, {"vgpukit-dra-plugin"}),
        ({"vgpukit.io/node": "true", "vgpukit.io/dra": "false"}, {"vgpukit-device-plugin"}),
        ({"vgpukit.io/kubevirt": "true"}, {"vgpukit-kubevirt-device-plugin"}),
        ({"vgpukit.io/node": "true", "vgpukit.io/kubevirt": "true"}, {"vgpukit-kubevirt-device-plugin"}),
        ({"vgpukit.io/node": "true", "vgpukit.io/kubevirt": "false"}, {"vgpukit-device-plugin"}),
    ],
)
def test_the_device_plugin_and_the_dra_plugin_never_serve_one_node_together(
    labels: dict[str, str], serving: set[str]
) -> None:
    """Both would offer the same devices, neither knowing of the other's allocations (so would the
    container device plugin and the KubeVirt one: the same VFs and mdevs under two resource names)."""
    plugins = [d for d in of_kind("DaemonSet") if d["metadata"]["name"] == "vgpukit-device-plugin"]
    plugins += [d for _n, d in dra_documents() if d["kind"] == "DaemonSet"]
    kubevirt = DEPLOY / "kubevirt" / "device-plugin.yaml"
    plugins += [d for d in yaml.safe_load_all(kubevirt.read_text()) if d and d["kind"] == "DaemonSet"]
    assert {d["metadata"]["name"] for d in plugins if _runs_on(d, labels)} == serving


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
    assert set(found) == {"TimeSliceConfig", "MemoryCapConfig", "MpsConfig", "QosClassConfig"}


# ---- DeviceTaintRules for maintenance (deploy/kubernetes/dra/maintenance/): one file per API version
MAINTENANCE = DRA / "maintenance"
# the API version of each file -> the releases that serve it (with its gates on), and the effects they take
SERVED = {
    "resource.k8s.io/v1": (["1.37"], {"None", "NoSchedule", "NoExecute"}),
    "resource.k8s.io/v1beta2": (["1.36", "1.37"], {"None", "NoSchedule", "NoExecute"}),
    "resource.k8s.io/v1alpha3": (["1.34", "1.35", "1.36", "1.37"], {"NoSchedule", "NoExecute"}),  # None: 1.35+
}
DEVICE = re.compile(r"(shared-)?(gpu|vf)-[0-9a-f]{4}-[0-9a-f]{2}-[0-9a-f]{2}-[0-7]|(shared-)?mig-[0-9a-f-]{36}")


def rules() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in sorted(MAINTENANCE.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


@pytest.mark.parametrize(("name", "doc"), rules(), ids=lambda v: v if isinstance(v, str) else v["metadata"]["name"])
def test_maintenance_rules_validate_for_every_release_that_serves_them(name: str, doc: dict[str, Any]) -> None:
    versions, effects = SERVED[doc["apiVersion"]]
    for version in versions:
        kubernetes_validate.validate(doc, version, strict=True)
    spec = doc["spec"]
    assert spec["taint"]["effect"] in effects, (name, doc["metadata"]["name"])
    assert set(spec["deviceSelector"]) <= {"driver", "pool", "device"}  # deviceClassName, CEL: tombstoned in 1.35
    assert spec["deviceSelector"]["driver"] == DRIVER_NAME and spec["taint"]["key"].startswith(f"{DRIVER_NAME}/")
    assert "device" not in spec["deviceSelector"] or DEVICE.fullmatch(spec["deviceSelector"]["device"])


def test_the_maintenance_files_say_the_same_for_each_release() -> None:
    by_file: dict[str, list[dict[str, Any]]] = {}
    for name, doc in rules():
        by_file.setdefault(name, []).append({k: v for k, v in doc.items() if k != "apiVersion"})
    newest = by_file.pop("device-taint-rules.yaml")
    assert {d["apiVersion"] for _n, d in rules()} == set(SERVED)
    for name, docs in by_file.items():
        dropped = [d for d in newest if d not in docs]
        assert all(d["spec"]["taint"]["effect"] == "None" for d in dropped), name  # only where a release lacks it
        assert all(d in newest for d in docs), name


def test_a_rule_a_release_does_not_take_is_caught() -> None:
    (_n, doc) = next((n, d) for n, d in rules() if d["apiVersion"] == "resource.k8s.io/v1")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(doc, "1.36", strict=True)  # no v1 DeviceTaintRule before 1.37
    bad = {**doc, "spec": {**doc["spec"], "deviceSelector": {**doc["spec"]["deviceSelector"], "deviceClassName": "x"}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.37", strict=True)
