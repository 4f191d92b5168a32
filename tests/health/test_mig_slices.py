"""MIG slices: an XID the driver attributes to a GPU instance counts against that slice alone when it
is application-class (action none or restart-app); any other XID hits the GPU and all its slices
(docs/health.md, "MIG slices"). Seen through ``vgpukit health --json``, the exporter and the DRA
plugin's health report."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Run, make_sim
from tests.exporter.helpers import scrape, value
from vgpukit.clikit.context import App
from vgpukit.health import fact
from vgpukit.health.model import DeviceHealth, SliceHealth
from vgpukit.wiring import Wiring

from .test_health import dev, doc, fault


def mig_host(run_cli: Run, tmp_path: Path) -> tuple[Path, list[int]]:
    sim = make_sim(tmp_path / "h")
    assert run_cli(sim, "partition", "gpu0", "--mig", "3g.20gb,3g.20gb").exit_code == 0
    app = App(sim_dir=sim, wiring=Wiring())
    try:
        assert app.nvml is not None
        gis = sorted(gi.id for gi in app.nvml.gpu_instances(0))
    finally:
        app.close()
    assert len(gis) == 2
    return sim, gis


def test_an_application_xid_in_one_slice_leaves_the_gpu_and_the_other_slice_healthy(
    run_cli: Run, tmp_path: Path
) -> None:
    sim, (a, b) = mig_host(run_cli, tmp_path)
    fault(run_cli, sim, "xid", "gpu0", "8", "--gi", str(a))  # engine idle timeout: degraded, restart-app
    d = doc(run_cli, sim, code=1)  # one slice degraded
    gpu = dev(d, "gpu0")
    assert gpu["state"] == "healthy" and gpu["action"] == "none"
    assert [e["gi"] for e in gpu["events"] if e["kind"] == "xid"] == [a]
    assert gpu["slices"] == [
        {"gi": a, "state": "degraded", "action": "restart-app", "reasons": [gpu["slices"][0]["reasons"][0]]}
    ]
    assert gpu["slices"][0]["reasons"][0].startswith("XID 8:")
    fams = scrape(sim)
    assert value(fams, "vgpukit_mig_instance_health", gpu="0", GPU_I_ID=str(a)) == 1
    assert value(fams, "vgpukit_mig_instance_health", gpu="0", GPU_I_ID=str(b)) == 0
    assert value(fams, "vgpukit_device_health", device="gpu0") == 0
    text = run_cli(sim, "health").stdout
    assert f"gpu0 GI {a}" in text and "degraded" in text


def test_a_device_wide_xid_in_a_slice_hits_the_gpu_and_every_slice(run_cli: Run, tmp_path: Path) -> None:
    sim, (a, b) = mig_host(run_cli, tmp_path)
    fault(run_cli, sim, "xid", "gpu0", "8", "--gi", str(b))
    fault(run_cli, sim, "xid", "gpu0", "48", "--gi", str(a))  # double-bit ECC: the GPU needs a reset
    gpu = dev(doc(run_cli, sim, code=4), "gpu0")
    assert gpu["state"] == "unusable" and gpu["action"] == "reset"
    assert {s["gi"]: s["state"] for s in gpu["slices"]} == {b: "unusable"}  # its own XID, and its GPU's state
    fams = scrape(sim)
    assert value(fams, "vgpukit_mig_instance_health", gpu="0", GPU_I_ID=str(a)) == 2
    assert value(fams, "vgpukit_mig_instance_health", gpu="0", GPU_I_ID=str(b)) == 2


def test_the_gi_must_exist_and_a_gpu_without_slices_is_as_before(run_cli: Run, tmp_path: Path) -> None:
    sim, _ = mig_host(run_cli, tmp_path)
    r = run_cli(sim, "sim", "fault", "xid", "gpu0", "8", "--gi", "9")
    assert r.exit_code == 3 and "no GPU instance 9" in r.stderr
    fault(run_cli, sim, "xid", "gpu1", "8")  # no slice: the GPU's, as before
    gpu1 = dev(doc(run_cli, sim, code=1), "gpu1")
    assert gpu1["state"] == "degraded" and "slices" not in gpu1 and "gi" not in gpu1["events"][0]


def _health(mig: tuple[str, ...], state: str) -> list[DeviceHealth]:
    s = SliceHealth(1, state, "restart-app", ("XID 8: test",), mig)
    return [DeviceHealth("gpu0", "0000:07:00.0", "gpu", "healthy", "none", (), (), (), (s,))]


def test_unusable_slices_are_named_by_their_mig_devices() -> None:
    assert fact.unusable_slices(_health(("MIG-a", "MIG-b"), "unusable")) == {
        "MIG-a": "XID 8: test",
        "MIG-b": "XID 8: test",
    }
    assert fact.unusable_slices(_health(("MIG-a",), "degraded")) == {}
    assert fact.unusable(_health(("MIG-a",), "unusable")) == {}  # the GPU itself is usable


def test_the_dra_health_report_marks_only_the_unusable_slice(tmp_path: Path) -> None:
    """A MIG device is UNHEALTHY when its slice (by its MIG UUID) or its GPU (by BDF) is unusable."""
    from tests.k8s import test_dra_plugin as dra
    from vgpukit.k8s.dra.server import Driver
    from vgpukit.k8s.drahealth_v1 import api_pb2 as hl

    sim = dra.hgx(tmp_path / "h")
    sick: dict[str, str] = {}
    driver = Driver(dra.NODE, dra.opener(sim), None, lambda: dict(sick))  # type: ignore[arg-type]
    migs = {n: d for n, d in driver.devices().items() if d.kind == "mig"}
    assert len(migs) == 2
    (one, one_dev), (other, _) = sorted(migs.items())
    sick[one_dev.device.id] = "XID 8: test"
    report = {name: status for name, status, _ in driver.health_report()}
    assert report[one] == hl.UNHEALTHY and report[other] == hl.HEALTHY
    sick.clear()
    sick[one_dev.device.topo_bdf] = "XID 48: reset"  # the GPU: every slice
    report = {name: status for name, status, _ in driver.health_report()}
    assert report[one] == report[other] == hl.UNHEALTHY
