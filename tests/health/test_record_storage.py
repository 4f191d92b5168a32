"""The health record on a full, read-only or failing /run: ``vgpukit health`` still reports (one warning line,
its exit code is the health state's, never the storage error's 1), and a long-running look (the device
plugin's) keeps the record in memory, says so once, and writes it again once it can."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.conftest import Run, invoke, make_sim
from vgpukit.clikit.context import App
from vgpukit.health import fact
from vgpukit.health.log import Keeper
from vgpukit.health.model import DeviceHealth
from vgpukit.sim.nvml import SimNvml
from vgpukit.wiring import Wiring

RECORD = ("run", "vgpukit", "health", "state.json")


@pytest.mark.parametrize("error", ["ENOSPC", "EROFS", "EIO", "EDQUOT"])
def test_health_reports_on_a_full_or_failing_run(run_cli: Run, tmp_path: Path, error: str) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    assert run_cli(sim, "sim", "fault", "storage", "/run", error).exit_code == 0
    assert run_cli(sim, "sim", "fault", "lost", "gpu5").exit_code == 0
    r = run_cli(sim, "health")
    assert r.exit_code == 4, r.output  # gpu5 unusable: the health state's code
    assert "gpu5" in r.stdout and "unusable" in r.stdout
    (warning,) = r.stderr.strip().splitlines()
    assert warning.startswith("vgpukit: warning: ") and f"({error})" in warning and "not recorded" in warning
    r = run_cli(sim, "health", "--json")
    assert r.exit_code == 4 and json.loads(r.stdout)["devices"][5]["state"] == "unusable"
    assert not sim.joinpath(*RECORD).exists()
    assert run_cli(sim, "sim", "fault", "storage", "/run", "ok").exit_code == 0
    r = run_cli(sim, "health")
    assert r.exit_code == 4 and r.stderr == "" and sim.joinpath(*RECORD).is_file()


def test_a_healthy_host_on_a_full_run_exits_0(run_cli: Run, tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    assert run_cli(sim, "sim", "fault", "storage", "/run/vgpukit", "EROFS").exit_code == 0
    r = run_cli(sim, "health")
    assert r.exit_code == 0 and r.stderr.count("warning") == 1


def test_a_long_running_look_keeps_the_record_in_memory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What the device plugin does at every poll (fact.current with its Keeper): the AER errors counted
    once (the record in memory holds their total), the note logged once, the file written once it can."""
    sim = make_sim(tmp_path / "h", "hgx-a100")
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci").exit_code == 0
    assert invoke(sim, "sim", "fault", "storage", "/run", "EROFS").exit_code == 0
    keeper = Keeper()
    caplog.set_level(logging.INFO, logger="vgpukit.health")

    def current() -> list[DeviceHealth]:
        app = App(sim_dir=sim, wiring=Wiring())  # a fresh host per poll, as the device plugin's (storage faults played)
        try:
            return fact.current(app.host, SimNvml(sim), keeper=keeper)
        finally:
            app.close()

    def look() -> dict[str, str]:
        return fact.unusable(current())

    assert look() == {}
    assert invoke(sim, "sim", "fault", "aer", "0000:05:00.2", "nonfatal").exit_code == 0
    for _ in range(3):
        devices = current()
        vf = next(d for d in devices if d.bdf == "0000:05:00.2")
        assert vf.state == "degraded" and len(vf.events) == 1  # one event, not one per look
    assert invoke(sim, "sim", "fault", "aer", "0000:05:00.2", "fatal").exit_code == 0
    assert "0000:05:00.2" in look()
    notes = [r for r in caplog.records if "kept in memory" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.WARNING and "(EROFS)" in notes[0].getMessage()
    assert not sim.joinpath(*RECORD).exists()
    assert invoke(sim, "sim", "fault", "storage", "/run", "ok").exit_code == 0
    assert "0000:05:00.2" in look()
    record = json.loads(sim.joinpath(*RECORD).read_text())
    assert [e["kind"] for e in record["events"]] == ["aer-nonfatal", "aer-fatal"]  # kept across the outage
    assert any("written again" in r.getMessage() for r in caplog.records)
