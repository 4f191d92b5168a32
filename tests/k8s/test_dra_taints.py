"""Device taints (KEP-5055): the unhealthy taint's effect (``--unhealthy-effect``). The DeviceTaintRule
examples for maintenance are validated with the other manifests (tests/k8s/test_deploy.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import invoke
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_capacity import SharedNode, shared_host
from tests.k8s.test_dra_plugin import NODE, _ok, api  # noqa: F401 (fixtures)
from vgpukit.k8s.dra.devices import DRIVER


def test_an_unusable_device_and_its_shared_form_are_tainted_with_the_effect_asked(
    short_tmp: Path,
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
