"""``vgpukit health`` on simulated hosts: every injected event kind, its state, action and exit code."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Run, make_sim
from vgpukit.nvml.errors import GPU_IS_LOST, NvmlError
from vgpukit.sim.nvml import SimNvml


def doc(run_cli: Run, sim: Path, *args: str, code: int | None = None) -> dict[str, Any]:
    r = run_cli(sim, "health", *args, "--json")
    if code is not None:
        assert r.exit_code == code, r.output
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def dev(d: dict[str, Any], name: str) -> dict[str, Any]:
    return next(x for x in d["devices"] if x["device"] == name)


def fault(run_cli: Run, sim: Path, *args: str) -> None:
    r = run_cli(sim, "sim", "fault", *args)
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("profile", ["hgx-a100", "h100-vgpu", "t4-mdev"])
def test_a_fresh_host_is_healthy(run_cli: Run, tmp_path: Path, profile: str) -> None:
    sim = make_sim(tmp_path / "h", profile)
    d = doc(run_cli, sim, code=0)
    assert d["devices"] and all(x["state"] == "healthy" for x in d["devices"])


@pytest.mark.parametrize("profile", ["hgx-a100", "h100-vgpu", "t4-mdev"])
def test_xid_79_makes_the_gpu_unusable_and_lost(run_cli: Run, tmp_path: Path, profile: str) -> None:
    sim = make_sim(tmp_path / "h", profile)
    fault(run_cli, sim, "xid", "gpu0", "79")
    d = doc(run_cli, sim, code=4)
    g = dev(d, "gpu0")
    assert g["state"] == "unusable" and g["action"] == "reboot"
    assert [e["kind"] for e in g["events"]] == ["xid", "lost"] and g["events"][0]["data"] == 79
    # the simulated driver answers GPU_IS_LOST for the GPU afterwards
    with pytest.raises(NvmlError) as err:
        SimNvml(sim).processes(0)
    assert err.value.code == GPU_IS_LOST


def test_an_application_xid_leaves_the_gpu_healthy_but_is_listed(run_cli: Run, sim_dir: Path) -> None:
    fault(run_cli, sim_dir, "xid", "gpu1", "13")
    d = doc(run_cli, sim_dir, code=0)
    g = dev(d, "gpu1")
    assert g["state"] == "healthy" and g["events"][0]["severity"] == "info"
    assert g["events"][0]["action"] == "restart-app"
    human = run_cli(sim_dir, "health")
    assert "XID 13" in human.stdout  # the recent events, without --watch


def test_an_unknown_xid_takes_the_documented_default(run_cli: Run, sim_dir: Path) -> None:
    fault(run_cli, sim_dir, "xid", "gpu0", "9999")
    g = dev(doc(run_cli, sim_dir, code=1), "gpu0")
    assert g["state"] == "degraded" and g["action"] == "drain"


@pytest.mark.parametrize("profile", ["hgx-a100", "t4-mdev"])
def test_ecc_errors(run_cli: Run, tmp_path: Path, profile: str) -> None:
    sim = make_sim(tmp_path / "h", profile)
    fault(run_cli, sim, "ecc", "gpu0")
    assert dev(doc(run_cli, sim, code=0), "gpu0")["events"][0]["kind"] == "ecc-single"
    fault(run_cli, sim, "ecc", "gpu0", "--double")
    g = dev(doc(run_cli, sim, code=4), "gpu0")
    assert g["state"] == "unusable" and g["action"] == "reset"
    assert any("uncorrected ECC errors counted" in r for r in g["reasons"])


def test_a_lost_gpu_is_unusable_until_it_recovers(run_cli: Run, sim_dir: Path) -> None:
    fault(run_cli, sim_dir, "lost", "gpu2")
    g = dev(doc(run_cli, sim_dir, code=4), "gpu2")
    assert g["state"] == "unusable" and g["events"][-1]["kind"] == "lost"
    fault(run_cli, sim_dir, "recover", "gpu2")
    g = dev(doc(run_cli, sim_dir, code=0), "gpu2")
    assert g["state"] == "healthy" and g["events"]  # the history stays, the state recovers


def test_a_pf_reset_taking_the_vfs_away(run_cli: Run, tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "h100-vgpu")
    doc(run_cli, sim, code=0)  # recorded: the VFs are there
    fault(run_cli, sim, "pf-reset", "0000:41:00.0")
    d = doc(run_cli, sim, code=4)  # the VFs are gone: unusable until re-created; the GPU itself works
    g = dev(d, "gpu0")
    assert g["state"] == "degraded" and "VFs configured but missing" in g["reasons"][0]
    assert g["action"] == "recreate-vfs" and g["repair"].startswith("vgpukit sriov enable 0000:41:00.0 --vfs 32")
    vf = dev(d, "gpu0 vf0")  # named as sriov list names it (trial 2: the BDF twice), its address beside
    assert vf["bdf"] == "0000:41:00.4"
    assert (vf["state"], vf["action"]) == ("unusable", "recreate-vfs") and vf["events"] == []  # not "pci-gone"
    assert re.search(r"^gpu0 vf0 +0000:41:00\.4 +unusable", run_cli(sim, "health").stdout, re.M)


def test_disabling_vfs_on_purpose_is_not_a_fault(run_cli: Run, tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "h100-vgpu")
    doc(run_cli, sim, code=0)
    assert run_cli(sim, "sriov", "disable", "gpu0").exit_code == 0
    d = doc(run_cli, sim, code=0)
    assert [x["device"] for x in d["devices"]] == ["gpu0"]


@pytest.mark.parametrize(("kind", "code", "state"), [("fatal", 4, "unusable"), ("nonfatal", 1, "degraded"),
                                                     ("correctable", 0, "healthy")])  # fmt: skip
def test_aer_errors(run_cli: Run, sim_dir: Path, kind: str, code: int, state: str) -> None:
    doc(run_cli, sim_dir, code=0)
    fault(run_cli, sim_dir, "aer", "0000:04:00.0", kind)
    g = dev(doc(run_cli, sim_dir, code=code), "gpu1")
    assert g["state"] == state and g["events"][0]["kind"] == f"aer-{kind}"
    doc(run_cli, sim_dir)  # the count is recorded: no second event for the same errors
    assert len(dev(doc(run_cli, sim_dir), "gpu1")["events"]) == 1


def test_a_vfio_device_whose_iommu_group_changed(run_cli: Run, sim_dir: Path) -> None:
    assert run_cli(sim_dir, "bind", "gpu3", "--driver", "vfio-pci").exit_code == 0
    doc(run_cli, sim_dir, code=0)
    record = sim_dir / "run" / "vgpukit" / "health" / "state.json"
    rec = json.loads(record.read_text())
    rec["pci"]["0000:24:00.0"]["group"] = 999  # what was recorded differs from the group now
    record.write_text(json.dumps(rec))
    g = dev(doc(run_cli, sim_dir, code=1), "gpu3")
    assert g["state"] == "degraded" and g["events"][-1]["kind"] == "iommu-group-changed"


def test_one_device(run_cli: Run, sim_dir: Path) -> None:
    fault(run_cli, sim_dir, "xid", "gpu0", "79")
    d = doc(run_cli, sim_dir, "gpu1", code=0)
    assert [x["device"] for x in d["devices"]] == ["gpu1"]
    assert run_cli(sim_dir, "health", "nic0").exit_code == 3  # not a device the health layer watches


def test_watch_streams_events_as_json_lines(run_cli: Run, sim_dir: Path) -> None:
    import threading
    import time

    from vgpukit.sim import nvml_events

    def later() -> None:
        time.sleep(0.4)
        nvml_events.inject_xid(sim_dir, 0, 48)

    t = threading.Thread(target=later)
    t.start()
    r = run_cli(sim_dir, "health", "--watch", "--for", "2", "--json")
    t.join()
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    kinds = [(x["kind"], x["data"]) for x in lines]
    assert ("xid", 48) in kinds and ("ecc-double", 0) in kinds
    assert all(x["schema"] == "vgpukit.health-event/v1" for x in lines)
    assert r.exit_code == 4


def test_a_bad_xid_table_is_one_line(run_cli: Run, sim_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "xid.yaml"
    bad.write_text("version: 1\nxids: {79: {meaning: x, severity: dire, action: none}}\n")
    r = run_cli(sim_dir, "health", "--xid-table", str(bad))
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr == f"vgpukit: error: {bad}:1:1: $: missing source, date, default\n"  # FILE:LINE:COLUMN: $.path
    bad.write_text(bad.read_text().replace("version: 1", "version: 1\nsource: s\ndate: 2026-11-27\ndefault: {}"))
    r = run_cli(sim_dir, "health", "--xid-table", str(bad))
    assert r.stderr == f"vgpukit: error: {bad}:5:35: $.xids.79.severity: expected one of info, degraded, unusable\n"


def test_xid_109_now_follows_the_catalog_a_gpu_reset(run_cli: Run, sim_dir: Path) -> None:
    fault(run_cli, sim_dir, "xid", "gpu2", "109")  # context switch timeout: the catalog says RESET_GPU
    g = dev(doc(run_cli, sim_dir, code=4), "gpu2")
    assert g["state"] == "unusable" and g["action"] == "reset"


def test_a_site_table_of_version_2_is_read_and_checked_against_its_catalog_bucket(
    run_cli: Run, sim_dir: Path, tmp_path: Path
) -> None:
    table = tmp_path / "site.yaml"
    row = (
        '{meaning: "engine exception", severity: degraded, action: restart-app, stricter: "seen with bad risers here",'
        " nvidia: {mnemonic: ROBUST_CHANNEL_GR_EXCEPTION, gpus: [A100], immediate: RESTART_APP,"
        " investigatory: WORKFLOW_XID_13}}"
    )
    head = 'version: 2\ndate: "2026-11-27"\nsources: [{title: "our notes", took: "all"}]\n'
    head += "default: {meaning: unknown, severity: degraded, action: drain}\n"
    table.write_text(head + f"xids:\n  13: {row}\n")
    fault(run_cli, sim_dir, "xid", "gpu1", "13")
    r = run_cli(sim_dir, "health", "--xid-table", str(table), "--json")
    assert r.exit_code == 1, r.output  # degraded: the site's stricter row
    assert dev(json.loads(r.stdout), "gpu1")["action"] == "restart-app"
    table.write_text(head + "xids:\n  13: " + row.replace(' stricter: "seen with bad risers here",', ""))
    r = run_cli(sim_dir, "health", "--xid-table", str(table))
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "RESTART_APP gives severity info" in r.stderr


def test_a_broken_record_starts_afresh(run_cli: Run, sim_dir: Path) -> None:
    record = sim_dir / "run" / "vgpukit" / "health" / "state.json"
    record.parent.mkdir(parents=True)
    record.write_text("{not json")
    assert run_cli(sim_dir, "health").exit_code == 0
    assert json.loads(record.read_text())["version"] == 1


def test_a_second_look_at_an_unchanged_host_writes_nothing(run_cli: Run, sim_dir: Path) -> None:
    """Pollers (the device plugin, the DRA plugin's health stream, labels) look every few seconds: the
    record is rewritten only when it changes (it was rewritten at every look: its trailing newline)."""
    assert run_cli(sim_dir, "health").exit_code == 0
    record = sim_dir / "run" / "vgpukit" / "health" / "state.json"
    before = record.stat()
    assert run_cli(sim_dir, "health").exit_code == 0
    after = record.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
