"""deploy/monitoring/: every metric name the alert rules and the Grafana dashboard query is one the
exporter emits (a scrape of a simulated host with MIG instances, a CUDA region and a QoS daemon)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import invoke, make_sim
from tests.qos.conftest import DaemonProc, wait_for

from .helpers import sample_names
from .test_tenants import _region

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
NAME = re.compile(r"\b((?:DCGM_FI|vgpukit)_[A-Za-z0-9_]+)\b")


def _exprs(node: Any) -> list[str]:
    """Every ``expr`` / ``query`` string anywhere in a document."""
    if isinstance(node, dict):
        return [v for k, v in node.items() if k in ("expr", "query") and isinstance(v, str)] + [
            e for v in node.values() for e in _exprs(v)
        ]
    if isinstance(node, list):
        return [e for v in node for e in _exprs(v)]
    return []


def referenced() -> dict[str, set[str]]:
    out = {}
    for path in sorted(MONITORING.iterdir()):
        docs = [json.loads(path.read_text())] if path.suffix == ".json" else list(yaml.safe_load_all(path.read_text()))
        out[path.name] = {m for e in _exprs(docs) for m in NAME.findall(e)}
    return out


@pytest.fixture(scope="module")
def emitted(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    import subprocess

    sim = make_sim(tmp_path_factory.mktemp("mon") / "host")
    assert invoke(sim, "partition", "gpu2", "--mig", "3g.20gb").exit_code == 0
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "1", "--driver", "vfio-pci").exit_code == 0
    _region(sim / "run/vgpukit/cuda/web/usage", {0: 1 << 30})
    d = DaemonProc(sim, sim=True).start()
    spinners = [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]) for _ in range(2)]
    try:  # two busy tenants sharing gpu0: the daemon freezes and thaws them (its latencies get measured)
        assert invoke(sim, "qos", "set", "gpu0", "--policy", "fixed-share").exit_code == 0
        for name, p, share in (("a", spinners[0], 20), ("b", spinners[1], 30)):
            args = [
                "gpu0",
                name,
                "--class",
                "offline",
                "--share",
                str(share),
                "--pid",
                str(p.pid),
                "--demand",
                "sample",
            ]
            assert invoke(sim, "qos", "tenant", "add", *args).exit_code == 0
        # the latency quantiles come once the daemon has measured something (its timer, at every tick)
        assert wait_for(lambda: d.req(op="status")["gpus"][0]["latency"]["timer"]["count"] > 0, timeout=5)
        r = invoke(sim, "exporter", "--once")
    finally:
        d.stop()
        for p in spinners:
            p.kill()
            p.wait()
    assert r.exit_code == 0
    return sample_names(r.stdout)


def test_the_files_query_something() -> None:
    found = referenced()
    assert set(found) >= {"alerts.yaml", "grafana-dashboard.json"}
    assert found["alerts.yaml"] and found["grafana-dashboard.json"]


@pytest.mark.parametrize("name", sorted(referenced()))
def test_every_queried_metric_is_emitted(name: str, emitted: set[str]) -> None:
    assert referenced()[name] - emitted == set()


def test_the_alerts_named_in_the_docs_exist() -> None:
    (doc,) = yaml.safe_load_all((MONITORING / "alerts.yaml").read_text())
    alerts = {r["alert"] for g in doc["spec"]["groups"] for r in g["rules"]}
    assert {"VgpukitDeviceUnusable", "VgpukitTenantMemoryCapRefused", "VgpukitShareBelowTarget"} <= alerts


def test_the_memory_cap_alert_fires_on_refusals() -> None:
    """The tenant alert is about allocations the cap refused (the region's counter), not about a tenant
    holding its whole cap (which is no failure)."""
    (doc,) = yaml.safe_load_all((MONITORING / "alerts.yaml").read_text())
    rules = {r["alert"]: r for g in doc["spec"]["groups"] for r in g["rules"]}
    expr = " ".join(rules["VgpukitTenantMemoryCapRefused"]["expr"].split())
    assert expr == "increase(vgpukit_tenant_memory_cap_refusals_total[5m]) > 0"
    assert not any("VgpukitTenantAtMemoryCap" in a for a in rules)
