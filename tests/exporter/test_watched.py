"""The long-running exporter keeps devices and health in the watch's model: the same series and values
as a scrape that reads everything afresh (the scrape's own timing series aside)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import Run, make_sim
from tests.watch.helpers import app_of
from vgpukit.clikit.watch import opener
from vgpukit.health.watched import health_views
from vgpukit.metrics.collector import HostCollector, text
from vgpukit.node.inventory import Options
from vgpukit.node.views import inventory_views
from vgpukit.watch.model import HostModel
from vgpukit.watch.touch import Touch

TIMING = re.compile(r"^vgpukit_exporter_scrape_(cpu_)?seconds ", re.MULTILINE)


def _series(out: str) -> list[str]:
    return [line for line in out.splitlines() if not TIMING.match(line)]


def test_a_scrape_from_the_model_equals_a_fresh_scrape(tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "h")
    for args in (
        ("sriov", "enable", "nic0", "--vfs", "4", "--driver", "vfio-pci"),
        ("partition", "gpu0", "--mig", "3g.20gb,2g.10gb"),
        ("sim", "hold", "0000:05:00.3"),
        ("sim", "fault", "xid", "gpu1", "48"),
    ):
        assert run_cli(sim, *args).exit_code == 0, args
    app = app_of(sim)
    try:
        views = {**inventory_views(lambda _h: Options(replicas=0)), **health_views(save=False)}
        model = HostModel(opener(app), views)
        t = Touch()
        t.everything("start")
        model.refresh(t)
        watched = text(HostCollector(app.host, lambda: app.nvml, model))
        afresh = text(HostCollector(app.host, lambda: app.nvml))
        assert "vgpukit_slice_held{" in watched and "vgpukit_device_health{" in watched
        assert _series(watched) == _series(afresh)
        assert run_cli(sim, "sim", "release", "40000").exit_code == 0  # holders: read at each scrape
        assert _series(text(HostCollector(app.host, lambda: app.nvml, model))) == _series(
            text(HostCollector(app.host, lambda: app.nvml))
        )
    finally:
        app.close()
