"""deploy/kubernetes/ applies cleanly: ``kubectl apply -k deploy/kubernetes/`` (then ``-k
deploy/kubernetes/dra/``) creates everything in an order where each object finds what it names.

kustomize is not packaged by Debian 12 or PyPI (Debian's kubernetes-client is kubectl 1.20, older than
the 1.30 the manifests are written for), so the kustomizations are read here as kustomize reads them --
``resources`` in the order listed, files only, inside their directory -- and checked: every manifest of
the directory is listed once (or named as left out on purpose), the namespace comes first, and each
object comes after what it names (its namespace, service account, ConfigMap, role, admission policy;
DeviceClasses before the plugin that serves them). Where ``kubectl`` is installed it also builds them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .test_deploy import DEPLOY, DRA, manifests

KUBEVIRT = DEPLOY / "kubevirt"
# the files the kustomizations leave out, and why (docs/kubernetes.md, "Deploy")
LEFT_OUT = {
    DRA / "examples.yaml": "example claims, to try once the plugin runs",
    DRA / "extended-resources.yaml": "needs the DRAExtendedResource gate (alpha in 1.34 and 1.35)",
    KUBEVIRT / "kubevirt-patch.yaml": "a patch of the KubeVirt CR, in KubeVirt's namespace (kubectl patch)",
    KUBEVIRT / "vmis.yaml": "example VMIs",
}
KUSTOMIZATIONS = [DEPLOY, DRA, KUBEVIRT]  # the first, then either or both of the others


def listed(directory: Path) -> list[Path]:
    doc = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert doc["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and doc["kind"] == "Kustomization"
    assert set(doc) == {"apiVersion", "kind", "resources"}, "only resources: nothing kustomize must rewrite"
    paths = [(directory / r).resolve() for r in doc["resources"]]
    for p in paths:  # kustomize's load restriction: files inside the kustomization's directory
        assert p.is_file() and p.parent == directory.resolve(), p
    return paths


def objects(paths: list[Path]) -> list[dict[str, Any]]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


def key(doc: dict[str, Any]) -> tuple[str, str | None, str]:
    return doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"]


def needs(doc: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    """What an object names that must exist before it (as kind, namespace, name)."""
    ns = doc["metadata"].get("namespace")
    out: list[tuple[str, str | None, str]] = [("Namespace", None, ns)] if ns else []
    kind, spec = doc["kind"], doc.get("spec", {})
    if kind == "DaemonSet":
        pod = spec["template"]["spec"]
        if "serviceAccountName" in pod:
            out.append(("ServiceAccount", ns, pod["serviceAccountName"]))
        out += [("ConfigMap", ns, v["configMap"]["name"]) for v in pod.get("volumes", []) if "configMap" in v]
    if kind == "ClusterRoleBinding":
        out.append((doc["roleRef"]["kind"], None, doc["roleRef"]["name"]))
        out += [(s["kind"], s.get("namespace"), s["name"]) for s in doc["subjects"]]
    if kind == "ValidatingAdmissionPolicyBinding":
        out.append(("ValidatingAdmissionPolicy", None, spec["policyName"]))
    return out


def test_every_manifest_is_listed_once_or_left_out_on_purpose() -> None:
    for directory in KUSTOMIZATIONS:
        paths = listed(directory)
        assert len(paths) == len(set(paths)), directory
        files = {p.resolve() for p in manifests(directory)}
        assert files - set(paths) == {p.resolve() for p in LEFT_OUT if p.parent == directory}, directory


def test_each_object_comes_after_what_it_names() -> None:
    made: set[tuple[str, str | None, str]] = set()
    order = [d for k in KUSTOMIZATIONS for d in objects(listed(k))]  # as the walkthrough applies them
    assert order[0]["kind"] == "Namespace"
    for doc in order:
        missing = [n for n in needs(doc) if n not in made]
        assert not missing, f"{key(doc)} comes before {missing}"
        made.add(key(doc))
    kinds = [d["kind"] for d in objects(listed(DRA))]
    assert kinds.index("DaemonSet") > max(i for i, k in enumerate(kinds) if k == "DeviceClass")


@pytest.mark.parametrize("directory", [DRA, KUBEVIRT], ids=lambda p: p.name)
def test_the_other_kustomizations_need_only_the_namespace_of_the_first(directory: Path) -> None:
    """Applied after deploy/kubernetes/ (the namespace), in either order; nothing else of it is named."""
    first = {key(d) for d in objects(listed(DEPLOY))}
    own = {key(d) for d in objects(listed(directory))}
    named = {n for d in objects(listed(directory)) for n in needs(d)} - own
    assert named <= first and {n[0] for n in named} == {"Namespace"}


def test_a_missing_dependency_is_caught() -> None:
    docs = objects(listed(DEPLOY))
    agent = next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "vgpukit-node-agent")
    assert ("ServiceAccount", "vgpukit-system", "vgpukit-node-agent") in needs(agent)
    assert ("ConfigMap", "vgpukit-system", "vgpukit-fleet") in needs(agent)
    assert ("Namespace", None, "vgpukit-system") in needs(agent)


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_kubectl_builds_the_same_objects_where_it_is_installed(directory: Path) -> None:
    """Not a promise (no Debian or PyPI package has a kubectl this recent): a check where one is at hand."""
    kubectl = shutil.which("kubectl")
    want = sorted(key(d) for d in objects(listed(directory)))
    if kubectl is None:
        assert want  # the reading above is the check
        return
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    built = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert sorted(key(d) for d in built) == want
    assert built[0]["kind"] == "Namespace" or directory != DEPLOY
