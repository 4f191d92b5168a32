"""The commands' own rules: quarantine/release, drain's wait, reset by the sysfs function reset, the policy
in the host config, and the simulated host's reset facts (nvidia-smi, the kernel's ``reset`` file)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import invoke, make_sim
from tests.remedy.test_remediate_sim import gpus
from vgpukit.sim.reactions_reset import count

Q = "var/lib/vgpukit/quarantine"


def ok(sim: Path, *args: str) -> dict[str, object]:
    r = invoke(sim, *args, "--json")
    assert r.exit_code == 0, (args, r.stderr)
    return json.loads(r.stdout)


def test_quarantine_is_a_persistent_record_and_idempotent(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    first = ok(sim, "quarantine", "gpu2", "--reason", "fan noise")
    assert first["changed"] and (sim / Q / "0000:23:00.0.json").exists()
    assert ok(sim, "quarantine", "gpu2", "--reason", "fan noise")["plan"] == []  # twice: nothing to do
    since = json.loads((sim / Q / "0000:23:00.0.json").read_text())["since"]
    assert ok(sim, "quarantine", "gpu2", "--reason", "fans replaced, burn-in")["changed"]
    again = json.loads((sim / Q / "0000:23:00.0.json").read_text())
    assert again["since"] == since and again["reason"] == "fans replaced, burn-in"  # when it started stays
    assert invoke(sim, "quarantine", "gpu2", "--reason", "a\tb").exit_code == 2  # one line, no control characters
    assert ok(sim, "release", "gpu2")["changed"] and not (sim / Q / "0000:23:00.0.json").exists()
    assert ok(sim, "release", "gpu2")["plan"] == []


def test_a_vf_is_released_with_its_pf(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    ok(sim, "sriov", "enable", "nic0", "--vfs", "2")
    ok(sim, "quarantine", "nic0")
    r = invoke(sim, "release", "0000:05:00.2")
    assert r.exit_code == 2 and "carved from nic0, which is (release nic0)" in r.stderr, r.stderr


def test_drain_names_who_is_still_there_when_time_is_up(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    ok(sim, "sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci")
    held = ok(sim, "sim", "hold", "0000:05:00.3", "--vm", "stubborn")
    cont = subprocess.Popen(["sleep", "60"])
    try:
        r = invoke(sim, "drain", "nic0", "--vms", "fail")
        assert r.exit_code == 4 and "held by 1 VM: stubborn (--vms fail)" in r.stderr, r.stderr
        # the process is no VM (no QEMU -name): drain waits for it, and says who is left
        ok(sim, "sim", "release", str(held["pid"]))
        hold = sim / "proc" / "40001"
        (hold / "fd").mkdir(parents=True)
        (hold / "comm").write_text("trainer\n")
        (hold / "cmdline").write_text("trainer\0")
        group = os.path.basename(os.readlink(sim / "sys/bus/pci/devices/0000:05:00.3/iommu_group"))
        os.symlink(f"/dev/vfio/{group}", hold / "fd" / "7")
        r = invoke(sim, "drain", "nic0", "--timeout", "0.5")
        assert r.exit_code == 4, r.stderr
        assert "is still held after 0.5 s: process trainer (pid 40001) on VF 0000:05:00.3" in r.stderr
        assert not (sim / Q / "0000:05:00.0.json").exists()  # rolled back: not left quarantined by a failed drain
    finally:
        cont.kill()
        cont.wait()


def test_reset_of_a_pci_function_goes_through_its_sysfs_reset(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    ok(sim, "sriov", "enable", "nic1", "--vfs", "3", "--driver", "vfio-pci")
    vfs = [v["bdf"] for v in ok(sim, "sriov", "list", "nic1")["pfs"][0]["vfs"]]  # type: ignore[index]
    plan = ok(sim, "reset", "nic1", "--dry-run")
    assert plan["reset_method"] == "function"
    assert (
        "reset nic1 (0000:25:00.0) through /sys/bus/pci/devices/0000:25:00.0/reset (the kernel tries flr)"
        in plan["plan"]
    )  # type: ignore[operator]
    ok(sim, "reset", "nic1")
    assert count(sim, "0000:25:00.0") == 1 and count(sim, "0000:05:00.0") == 0
    after = ok(sim, "sriov", "list", "nic1")["pfs"][0]["vfs"]  # type: ignore[index]
    assert [(v["bdf"], v["driver"]) for v in after] == [(v, "vfio-pci") for v in vfs]  # the same VFs and drivers
    assert invoke(sim, "reset", "0000:11:00.0").exit_code == 5  # the BMC's VGA: no reset method


def test_the_simulated_nvidia_smi_and_kernel_reset(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    smi = [str(sim / "usr/bin/nvidia-smi")]
    env = {**os.environ, "VGPUKIT_ROOT": str(sim)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*smi, *args], capture_output=True, text=True, env=env, check=False)

    r = run("-r", "-i", "1")
    assert r.returncode == 255 and "In use by another client" in r.stdout  # persistence mode counts as one
    assert run("-pm", "0", "-i", "1").stdout.strip() == "Disabled persistence mode for GPU 00000000:04:00.0."
    assert run("--query-gpu=persistence_mode,reset_count", "--format=csv,noheader", "-i", "1").stdout == "Disabled, 0\n"
    ok(sim, "partition", "gpu1", "--mig", "3g.20gb")
    assert run("-r", "-i", "1").stdout.strip() == "GPU 00000000:04:00.0 was successfully reset."
    assert gpus(sim)[1]["gis"] == [] and gpus(sim)[1]["mig_current"] and gpus(sim)[1]["resets"] == 1
    assert invoke(sim, "sim", "fault", "xid", "gpu2", "79").exit_code == 0
    assert run("-pm", "0", "-i", "2").returncode == 0
    assert run("-r", "-i", "2").returncode == 15  # lost: a reset does not bring it back
    assert run("-r", "-i", "9").returncode == 6
    reset = sim / "sys/bus/pci/devices/0000:05:00.0/reset"
    assert oct(reset.stat().st_mode & 0o777) == "0o200"
    assert (sim / "sys/bus/pci/devices/0000:05:00.0/reset_method").read_text().strip() == "flr"
    assert not (sim / "sys/bus/pci/devices/0000:11:00.0/reset").exists()  # a VGA controller: none


def test_the_policy_is_part_of_the_host_config(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    cfg = tmp_path / "host.yaml"
    cfg.write_text("version: vgpukit.host/v1\nconfigs:\n  a:\n    remediation:\n      start: {reboot: remediate}\n")
    r = invoke(sim, "apply", "-f", str(cfg))
    refused = "host.yaml:5:23: config a: $.configs.a.remediation.start.reboot: expected one of drain, none, quarantine"
    assert r.exit_code == 2 and refused in r.stderr, r.stderr
    cfg.write_text("version: vgpukit.host/v1\nconfigs:\n  a:\n    remediation:\n      vms: migrate\n")
    r = invoke(sim, "apply", "-f", str(cfg))
    assert r.exit_code == 2 and "vms migrate needs to (the destination libvirt URI)" in r.stderr, r.stderr
    cfg.write_text("version: vgpukit.host/v1\nconfigs:\n  a:\n    remediation:\n      vms: managedsave\n")
    first = ok(sim, "apply", "-f", str(cfg))
    assert first["areas"]["remediation"] == 1  # type: ignore[index]
    assert "vms: managedsave" in (sim / "etc/vgpukit/remediation.yaml").read_text()
    assert ok(sim, "apply", "-f", str(cfg))["plan"] == []


def test_drain_stops_the_qos_tenants_processes_when_asked(tmp_path: Path) -> None:
    import threading

    sim = make_sim(tmp_path / "h", "hgx-a100")
    worker = subprocess.Popen(["sleep", "60"])  # a QoS tenant's process on gpu1 (a container's, say)
    threading.Thread(target=worker.wait, daemon=True).start()  # its parent reaps it when it ends
    (sim / "etc/vgpukit/qos.yaml").write_text(
        f"gpus:\n  gpu1:\n    tenants:\n      t: {{class: online, share: 50, pids: [{worker.pid}]}}\n"
    )
    try:
        plan = ok(sim, "drain", "gpu1", "--dry-run")
        assert [h["pid"] for h in plan["holders"]] == [worker.pid]  # type: ignore[index]
        r = invoke(sim, "drain", "gpu1", "--timeout", "0.5")
        assert r.exit_code == 4 and f"QoS tenant t (pid {worker.pid}) on gpu1 (0000:04:00.0) (QoS gpu1)" in r.stderr
        done = ok(sim, "drain", "gpu1", "--tenants", "stop", "--timeout", "10")
        assert f"stop QoS tenant t on gpu1 (SIGTERM to pid {worker.pid})" in done["plan"]  # type: ignore[operator]
        assert worker.poll() == -15 and (sim / Q / "0000:04:00.0.json").exists()
    finally:
        worker.kill()


def test_a_reset_is_a_recovery_point_for_the_health_layer(tmp_path: Path) -> None:
    """XID 46 (a GPU timeout) leaves nothing lasting in the driver: only the record of the reset tells the
    health layer that its event no longer counts."""
    sim = make_sim(tmp_path / "h", "hgx-a100")
    assert invoke(sim, "sim", "fault", "xid", "gpu1", "46").exit_code == 0
    assert invoke(sim, "health", "gpu1").exit_code == 4
    ok(sim, "reset", "gpu1")
    assert invoke(sim, "health", "gpu1").exit_code == 0
    assert json.loads((sim / "run/vgpukit/health/resets.json").read_text()).keys() == {"0000:04:00.0"}


def test_the_policy_releases_its_quarantine_when_the_device_is_healthy_after_a_reboot(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    boot = sim / "proc/sys/kernel/random/boot_id"
    assert boot.read_text().strip()  # the simulator has one (its own fact)
    boot.write_text("11111111-1111-1111-1111-111111111111\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text("start: {reboot: quarantine}\n")
    auto = ["remediate", "--auto", "--policy", str(policy), "--for", "0", "--json"]
    assert invoke(sim, "sim", "fault", "xid", "gpu5", "79").exit_code == 0
    first = [json.loads(line) for line in invoke(sim, *auto).stdout.splitlines()]
    assert [(e["device"], e["what"], e["outcome"], e["escalate"]) for e in first] == [
        ("gpu5", "quarantine", "escalated", "reboot")
    ]
    record = json.loads((sim / Q / "0000:84:00.0.json").read_text())
    assert (record["by"], record["boot_id"], record["evict"]) == (
        "policy",
        "11111111-1111-1111-1111-111111111111",
        False,
    )
    assert invoke(sim, *auto).stdout == ""  # said once
    boot.write_text("22222222-2222-2222-2222-222222222222\n")  # the reboot the escalation asked for
    assert invoke(sim, "sim", "fault", "recover", "gpu5").exit_code == 0
    assert invoke(sim, "health", "gpu5", "--window", "0").exit_code == 0
    again = [json.loads(line) for line in invoke(sim, *auto).stdout.splitlines()]
    assert [(e["device"], e["what"], e["outcome"]) for e in again] == [("gpu5", "release", "done")]
    assert not (sim / Q / "0000:84:00.0.json").exists()
