"""The device plugin on a read-only /run (a manifest that mounts the host read-only, a full disk): a device
that goes bad still turns Unhealthy within a poll; the health record is kept in memory and that is said once."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from tests.k8s.kubelet import Kubelet
from vgpukit.clikit.context import App
from vgpukit.k8s import cli_health, kubevirt
from vgpukit.k8s.plugin import Manager, plugin_dir
from vgpukit.stopping import Stop
from vgpukit.wiring import Wiring

VF_RES = "vgpukit.io/vm-pci-15b3-101c"


@pytest.mark.parametrize("error", ["EROFS", "ENOSPC"])
def test_a_bad_vf_turns_unhealthy_on_a_read_only_run(
    short_tmp: Path, error: str, caplog: pytest.LogCaptureFixture
) -> None:
    sim = make_sim(short_tmp / "h")
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci").exit_code == 0
    assert invoke(sim, "sim", "fault", "storage", "/run", error).exit_code == 0
    app = App(sim_dir=sim, wiring=Wiring())
    host = app.host
    kubelet = Kubelet(plugin_dir(host)).start()

    def open_host() -> tuple[object, object, object]:
        fresh = App(sim_dir=sim, wiring=Wiring())
        return fresh.host, None, fresh.close

    caplog.set_level(logging.WARNING, logger="vgpukit.health")
    manager = Manager(host, kubevirt.Poller(open_host, "vgpukit"), "devices", health=cli_health.health(app))  # type: ignore[arg-type]
    events: list[str] = []
    stop = Stop()
    thread = threading.Thread(target=manager.run, args=(stop, 0.05, events.append), daemon=True)
    thread.start()
    try:
        assert kubelet.wait(
            lambda: VF_RES in kubelet.endpoints and set(kubelet.endpoints[VF_RES].devices.values()) == {"Healthy"}
        )
        assert invoke(sim, "sim", "fault", "aer", "0000:05:00.2", "fatal").exit_code == 0
        assert kubelet.wait(lambda: kubelet.endpoints[VF_RES].devices.get("0000:05:00.2") == "Unhealthy")
        assert kubelet.endpoints[VF_RES].devices["0000:05:00.3"] == "Healthy"
    finally:
        stop.set()
        thread.join(10)
        kubelet.stop()
        app.close()
    assert not [e for e in events if "health check failed" in e]
    notes = [r.getMessage() for r in caplog.records if "kept in memory" in r.getMessage()]
    assert len(notes) == 1 and f"({error})" in notes[0]
