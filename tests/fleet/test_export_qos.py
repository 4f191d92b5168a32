"""``export`` writes the QoS configuration the daemon runs: the YAML plus the run-time changes
(``qos tenant add`` while it runs), the tenants ``k8s resources`` advertises. Applying the export on
the same host changes nothing; on another host it makes them permanent there (its YAML)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import as_json, invoke, make_sim
from vgpukit.qos.config import Overlay
from vgpukit.qos.model import Tenant

from ..conftest import sim_host


def _runtime_tenant(sim: Path) -> None:
    """What ``qos tenant add gpu1 rt ...`` leaves in the daemon's run-time record."""
    host = sim_host(sim)
    overlay = Overlay.load(host)
    overlay.record_tenant("gpu1", "rt", Tenant("rt", "offline", 20, "cgroup", cgroup="rt.slice").validate())
    overlay.save(host)


def test_export_keeps_run_time_tenants(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "a", "hgx-a100")
    base = "gpus:\n  gpu0:\n    tenants:\n      web: {class: online, share: 50, cgroup: web.slice}\n"
    (sim / "etc/vgpukit/qos.yaml").write_text(base)
    _runtime_tenant(sim)
    advertised = as_json(invoke(sim, "k8s", "resources", "--json"))["resources"]["vgpukit.io/gpu-share"]
    assert any(d["id"].endswith("-rt") for d in advertised)  # k8s advertises the run-time tenant
    exported = invoke(sim, "export")
    assert exported.exit_code == 0, exported.stderr
    qos = yaml.safe_load(exported.stdout)["configs"]["current"]["qos"]
    assert set(qos["gpus"]) == {"gpu0", "gpu1"} and qos["gpus"]["gpu1"]["tenants"]["rt"]["share"] == 20
    doc = tmp_path / "export.yaml"
    doc.write_text(exported.stdout)
    same = as_json(invoke(sim, "apply", "-f", str(doc), "--json"))
    assert same["plan"] == [], same["plan"]
    other = make_sim(tmp_path / "b", "hgx-a100")
    r = invoke(other, "apply", "-f", str(doc), "--json")
    assert r.exit_code == 0 and as_json(r)["areas"]["qos"] == 1
    written = yaml.safe_load((other / "etc/vgpukit/qos.yaml").read_text())
    assert "rt" in written["gpus"]["gpu1"]["tenants"]
    assert as_json(invoke(other, "apply", "-f", str(doc), "--json"))["plan"] == []
