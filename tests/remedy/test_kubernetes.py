"""Quarantine and remediation as Kubernetes sees them (issue 35 §1, §2).

* The device plugin (as ``vgpukit k8s device-plugin`` wires it) lists a quarantined GPU's devices and a
  quarantined PF's VFs Unhealthy, and Healthy again once released.
* The DRA driver (as ``vgpukit k8s dra-plugin`` wires it) taints a quarantined device NoSchedule, and
  NoExecute once it is drained (``vgpukit drain``: Kubernetes evicts its pods).
* The node agent runs the installed remediation policy and reports each event as a Kubernetes Event on
  its Node: the remediation of gpu3 (Normal), the reboot gpu5 needs (Warning), each once.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim, sim_host
from tests.k8s.apiserver import ApiServer
from tests.k8s.kubelet import Kubelet
from tests.k8s.test_device_plugin import MIG_3G, hgx, poller
from tests.k8s.test_dra_plugin import NODE, opener
from vgpukit.clikit.context import App
from vgpukit.k8s.agent import Agent, ApplyRunner, RemedyRunner, kube_api
from vgpukit.k8s.cli_health import evicting, health
from vgpukit.k8s.dra.api import ClaimReader, resource_api
from vgpukit.k8s.dra.server import Driver
from vgpukit.k8s.dra.slices import Publisher, slice_name
from vgpukit.k8s.plugin import HEALTHY, UNHEALTHY, Manager, plugin_dir
from vgpukit.wiring import Wiring

VGPUKIT = str(Path(sys.executable).with_name("vgpukit"))
VF = "vgpukit.io/vf-15b3-101b"


def ok(sim: Path, *args: str) -> None:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr


def app(sim: Path) -> App:
    return App(sim_dir=sim, wiring=Wiring())


def test_the_device_plugin_lists_a_quarantined_device_unhealthy(short_tmp: Path) -> None:
    sim = hgx(short_tmp / "h")
    host = sim_host(sim)
    kubelet = Kubelet(plugin_dir(host)).start()
    manager = Manager(host, poller(sim), health=health(app(sim)))
    try:
        manager.poll()

        def states(resource: str) -> list[str]:
            ep = kubelet.endpoints.get(resource)
            return sorted(ep.devices.values()) if ep else []

        assert kubelet.wait(lambda: len(states(MIG_3G)) == 3 and len(states(VF)) == 6)

        assert set(states(MIG_3G)) == {HEALTHY} and set(states(VF)) == {HEALTHY}
        ok(sim, "quarantine", "gpu0", "--reason", "bench")
        ok(sim, "quarantine", "nic0")
        events = manager.poll()
        assert any("0000:03:00.0 unhealthy: quarantined: bench" in e for e in events), events
        assert kubelet.wait(lambda: states(MIG_3G) == [HEALTHY, UNHEALTHY, UNHEALTHY])  # gpu0's two slices
        assert kubelet.wait(lambda: states(VF).count(UNHEALTHY) == 4)  # nic0's VFs, not nic2's
        ok(sim, "release", "gpu0")
        for _ in range(5):
            manager.poll()
        assert kubelet.wait(lambda: set(states(MIG_3G)) == {HEALTHY})
    finally:
        manager.close()
        kubelet.stop()


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE)
    yield server
    server.close()


def test_the_dra_driver_taints_quarantined_devices_and_evicts_drained_ones(tmp_path: Path, api: ApiServer) -> None:
    sim = make_sim(tmp_path / "h")
    ok(sim, "partition", "gpu0", "--mig", "3g.20gb,3g.20gb")
    client = resource_api(str(api.kubeconfig(tmp_path / "kubeconfig")))
    driver = Driver(NODE, opener(sim), ClaimReader(client), health(app(sim)), taints="on")
    driver.evicting = evicting(app(sim))
    pub = Publisher(client, NODE)
    pub.publish(*driver.publication())
    assert not any(d.get("taints") for d in api.slices[slice_name(NODE)]["spec"]["devices"])

    def effects() -> dict[str, str]:
        pub.publish(*driver.publication())
        devices = api.slices[slice_name(NODE)]["spec"]["devices"]
        return {d["name"]: d["taints"][0]["effect"] for d in devices if d.get("taints")}

    ok(sim, "quarantine", "gpu1")
    quarantined = effects()
    assert quarantined and set(quarantined.values()) == {"NoSchedule"}
    ok(sim, "drain", "gpu0")  # nothing holds it: quarantined with evict, nothing to wait for
    drained = effects()
    assert set(drained) - set(quarantined) and {drained[n] for n in set(drained) - set(quarantined)} == {"NoExecute"}
    assert {drained[n] for n in quarantined} == {"NoSchedule"}
    ok(sim, "release", "gpu0")
    ok(sim, "release", "gpu1")
    assert effects() == {}


def test_the_node_agent_runs_the_policy_and_reports_kubernetes_events(tmp_path: Path, api: ApiServer) -> None:
    sim = make_sim(tmp_path / "h")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "version: vgpukit.host/v1\nconfigs:\n  gpus:\n    remediation: {per-device: {runs: 2, hours: 1}}\n"
    )
    client = kube_api(str(api.kubeconfig(tmp_path / "kubeconfig")))
    agent = Agent(client, NODE, ApplyRunner(VGPUKIT, fleet, sim_dir=sim), log=lambda _line: None)
    agent.remedy = RemedyRunner(VGPUKIT, sim_dir=sim)
    assert agent.remediate() == 0  # no policy installed yet: nothing to say
    api.set_labels({"vgpukit.io/config": "gpus"})
    assert agent.reconcile(agent.current_config()).state == "success"  # apply installs the policy
    ok(sim, "sim", "fault", "xid", "gpu3", "95")
    ok(sim, "sim", "fault", "xid", "gpu5", "79")
    assert agent.remediate() == 2
    assert agent.remediate() == 0  # the escalation is said once; gpu3 is healthy
    by_reason = {e["reason"]: e for e in api.events}
    assert set(by_reason) == {"VgpukitRemediation", "VgpukitEscalation"}
    cured, reboot = by_reason["VgpukitRemediation"], by_reason["VgpukitEscalation"]
    assert cured["type"] == "Normal" and cured["message"].startswith("gpu3 (0000:24:00.0): remediate done")
    assert reboot["type"] == "Warning" and "gpu5 (0000:84:00.0): drain escalated: needs a reboot" in reboot["message"]
    assert {e["involvedObject"]["name"] for e in api.events} == {NODE}
    assert {e["metadata"]["namespace"] for e in api.events} == {"default"}
