"""``vgpukit sim reboot`` (docs/simulator.md, "Reboot"): the kernel's state is built again from the
profile (no VFs, no mdevs, default drivers, no GPU instances), the disk stays (mdevctl's definitions,
files under /etc and /var), the MIG mode stays (a pending one applied); so "does it come back at boot"
is the boot units' commands run after it, not a fake with ``mdev remove``."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import as_json, invoke, make_sim


def ok(sim: Path, *args: str) -> str:
    r = invoke(sim, *args)
    assert r.exit_code == 0, (args, r.stderr)
    return r.stdout


def test_a_reboot_clears_the_kernel_state_and_keeps_the_disk_and_the_mig_mode(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    ok(sim, "sriov", "enable", "nic0", "--vfs", "4")
    ok(sim, "bind", "nic1", "--driver", "vfio-pci")
    ok(sim, "partition", "gpu1", "--mig", "3g.20gb")
    ok(sim, "sim", "hold", "gpu3")
    assert as_json(invoke(sim, "sim", "info", "--json"))["holders"] != []
    (sim / "etc/vgpukit").mkdir(parents=True, exist_ok=True)
    (sim / "etc/vgpukit/host.yaml").write_text("kept\n")
    (sim / "run/vgpukit").mkdir(parents=True, exist_ok=True)
    (sim / "run/vgpukit/gone").write_text("cleared\n")
    doc = as_json(invoke(sim, "sim", "reboot", "--json"))
    assert "/etc" in doc["kept"] and "0000:04:00.0" in doc["mig"]
    assert (sim / "etc/vgpukit/host.yaml").read_text() == "kept\n" and not (sim / "run/vgpukit/gone").exists()
    devices = {d["alias"]: d for d in as_json(invoke(sim, "devices", "--json"))["devices"] if d.get("alias")}
    assert devices["nic0"]["sriov"]["num_vfs"] == 0 and devices["nic1"]["driver"] == "mlx5_core"
    gpu1 = devices["gpu1"]["gpu"]
    assert gpu1["mig_current"] and gpu1["mig_pending"]  # the mode stays
    status = as_json(invoke(sim, "mig", "status", "--json"))
    assert "MIG-" not in str(status)  # its instances are gone
    assert as_json(invoke(sim, "sim", "info", "--json"))["holders"] == []


def test_auto_definitions_come_back_through_the_restore_units_command(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "t4", "t4-mdev")
    made = as_json(invoke(sim, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--count", "2", "--define", "--auto",
                          "--json"))["vgpus"]  # fmt: skip
    ok(sim, "vgpu", "create", "gpu1", "--type", "T4-4Q")  # not defined: gone for good
    ok(sim, "sim", "reboot")
    rows = as_json(invoke(sim, "vgpu", "list", "--json"))["vgpus"]
    assert {v["id"] for v in rows} == {v["id"] for v in made} and not any(v["active"] for v in rows)
    ok(sim, "mdev", "start", "--all")  # what vgpukit-mdev-restore.service runs at boot
    rows = as_json(invoke(sim, "vgpu", "list", "--json"))["vgpus"]
    assert {v["id"] for v in rows if v["active"]} == {v["id"] for v in made}
