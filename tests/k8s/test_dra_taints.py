"""Device taints (KEP-5055): the unhealthy taint's effect (``--unhealthy-effect``) and the DeviceTaintRule
examples for maintenance (deploy/kubernetes/dra/maintenance/), each valid for the releases it is written for."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import invoke
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_capacity import SharedNode, shared_host
from tests.k8s.test_dra_plugin import NODE, _ok, api, short_tmp  # noqa: F401 (fixtures)
from vgpukit.k8s.dra.devices import DRIVER

MAINTENANCE = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "dra" / "maintenance"
# the API version of each file -> the releases that serve it (with its gates on), and the effects they take
SERVED = {
    "resource.k8s.io/v1": (["1.37"], {"None", "NoSchedule", "NoExecute"}),
    "resource.k8s.io/v1beta2": (["1.36", "1.37"], {"None", "NoSchedule", "NoExecute"}),
    "resource.k8s.io/v1alpha3": (["1.34", "1.35", "1.36", "1.37"], {"NoSchedule", "NoExecute"}),  # None: 1.35+
}
DEVICE = re.compile(r"(shared-)?(gpu|vf)-[0-9a-f]{4}-[0-9a-f]{2}-[0-9a-f]{2}-[0-7]|(shared-)?mig-[0-9a-f-]{36}")


def test_an_unusable_device_and_its_shared_form_are_tainted_with_the_effect_asked(
    short_tmp: Path,  # noqa: F811
    api: ApiServer,  # noqa: F811
) -> None:
    node = SharedNode(shared_host(short_tmp / "h"), api)
    try:
        node.driver.taints_ok = True
        for effect in ("NoSchedule", "NoExecute"):
            node.driver.unhealthy_effect = effect
            assert not any(e.get("taints") for e in node.driver.publication()[0])  # published, its memory known
            _ok(node.sim, "sim", "fault", "xid", "gpu0", "79")  # gpu0 fell off the bus: NVML no longer says
            tainted = {e["name"]: e["taints"] for e in node.driver.publication()[0] if e.get("taints")}
            (name,) = tainted  # gpu0, published shared: its shared form
            assert name.startswith("shared-gpu-")
            assert tainted[name] == [{"key": f"{DRIVER}/unhealthy", "value": "unusable", "effect": effect}]
            _ok(node.sim, "sim", "fault", "recover", "gpu0")
            assert not any(e.get("taints") for e in node.driver.publication()[0])
        node.share = "off"
        node.restart()
        node.driver.taints_ok, node.driver.unhealthy_effect = True, "NoExecute"
        node.driver.publication()
        _ok(node.sim, "sim", "fault", "xid", "gpu0", "79")
        tainted = {e["name"]: e["taints"] for e in node.driver.publication()[0] if e.get("taints")}
        (name,) = tainted
        assert name.startswith("gpu-") and [t["effect"] for t in tainted[name]] == ["NoExecute"]  # exclusive now
    finally:
        node.close()


@pytest.mark.parametrize("effect", ["PreferNoSchedule", "noexecute", "None", ""])
def test_unhealthy_effect_takes_what_the_api_allows_a_node_taint_is_refused(effect: str) -> None:
    r = invoke(None, "k8s", "dra-plugin", "--node", "n1", "--unhealthy-effect", effect)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--unhealthy-effect" in r.stderr


def test_unhealthy_effect_noexecute_is_accepted() -> None:
    r = invoke(None, "k8s", "dra-plugin", "--node", "n1", "--unhealthy-effect", "NoExecute", "--help")
    assert r.exit_code == 0, r.stderr


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
    assert spec["deviceSelector"]["driver"] == DRIVER and spec["taint"]["key"].startswith(f"{DRIVER}/")
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
