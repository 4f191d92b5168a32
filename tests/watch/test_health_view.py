"""The health view hands the watch's NVML events to the look: a real driver's event set sees only what
comes after it is created, so a look that opened its own would never see an XID."""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import make_sim
from vgpukit.health.watched import health_views
from vgpukit.nvml.model import NvmlEvent
from vgpukit.pci import Scan
from vgpukit.sim.nvml import SimNvml
from vgpukit.sim.nvml_events import SimEventWatcher
from vgpukit.watch.model import Refresh
from vgpukit.watch.scan import WarmScan
from vgpukit.watch.touch import Touch

from .helpers import app_of


class RealLike(SimNvml):
    """The simulated driver whose event sets, as a real driver's, see only what comes after them."""

    def watch_events(self, since: dict[int, int] | None = None) -> SimEventWatcher:
        return super().watch_events(None)


def _look(sim: Path, events: list[NvmlEvent]) -> dict[str, str]:
    app = app_of(sim)
    try:
        touch = Touch()
        touch.kinds.add("nvml")
        views = health_views(save=True)
        r = Refresh(app.host, RealLike(sim), WarmScan(app.host), touch, events, {})
        r.values["health"] = views["health"].compute(r)
        return {d.device: d.state for d in views["health"].compute(r)} | views["sick"].compute(r)
    finally:
        app.close()


def test_an_xid_the_watch_heard_from_a_real_driver_reaches_the_devices_health(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    gpu1 = next(d.bdf for d in Scan(app_of(sim).host).devices() if d.bdf.startswith("0000:04:"))
    assert _look(sim, [])["gpu1"] == "healthy"
    seen = _look(sim, [NvmlEvent(1, "xid", 79, time.time())])  # no seq: a real driver's, asked for no more
    assert seen["gpu1"] == "unusable" and gpu1 in seen
    assert _look(sim, [])["gpu1"] == "unusable"  # recorded: the next look (its own event set empty) still has it


def test_an_event_the_simulated_driver_keeps_is_taken_once_from_the_record_cursor(tmp_path: Path) -> None:
    from vgpukit.sim import nvml_events

    sim = make_sim(tmp_path / "h")
    nvml_events.inject_xid(sim, 1, 48)
    app = app_of(sim)
    try:
        views = health_views(save=True)
        kept = SimNvml(sim).watch_events({}).wait(0)  # the watch's own set delivered it too (with its seq)
        r = Refresh(app.host, SimNvml(sim), WarmScan(app.host), Touch(kinds={"nvml"}), kept, {})
        devices = views["health"].compute(r)
    finally:
        app.close()
    gpu1 = next(d for d in devices if d.device == "gpu1")
    assert [e.kind for e in gpu1.events].count("xid") == 1  # not twice: the record's cursor says it was taken
