"""Curing one device on simulated hosts, everything else untouched (issue 35, "Proof").

hgx-a100: XID 95 on gpu3, which carries MIG slices and a QoS tenant with a live process, while a
libvirt domain holds a VF of nic0 and gpu2 has a MIG layout of its own: only gpu3's work moves, gpu3
is reset (the simulated nvidia-smi: persistence mode off and back) and comes back with the same MIG
layout (profiles, placements, GPU instance ids) and GPU UUID; the other GPUs, nic0's VFs and the
domain never notice. t4-mdev: a VM using two vGPUs (mdevs) is shut down through libvirt, the vGPUs come
back with the same UUIDs and the VM runs again. h100-vgpu: a VM on a vGPU VF is saved (managed save)
and restored. XID 79: quarantined and drained, the reboot raised once, never reset.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke, make_sim
from tests.remedy.world import URI, Qemu
from vgpukit.sim import nvml_state


def ok(sim: Path, *args: str) -> dict[str, Any]:
    r = invoke(sim, *args, "--json")
    assert r.exit_code == 0, (args, r.stderr)
    return json.loads(r.stdout) if r.stdout.strip() else {}


def gpus(sim: Path) -> list[dict[str, Any]]:
    """The simulated driver's own view of every GPU (its state file)."""
    with nvml_state._locked(sim, write=False) as state:
        return [dict(g) for g in state["gpus"]]


def layout(g: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A GPU's MIG layout by what stays the same across a re-creation (not the MIG UUIDs: the driver's)."""
    return sorted(
        (
            gi["id"],
            gi["profile_id"],
            gi["start"],
            gi["size"],
            tuple(sorted((c["start"], c["slices"]) for c in gi["cis"])),
        )
        for gi in g["gis"]
    )


def mig_uuids(g: dict[str, Any]) -> set[str]:
    return {c["uuid"] for gi in g["gis"] for c in gi["cis"]}


@pytest.fixture
def qemu(request: pytest.FixtureRequest) -> Any:
    pytest.importorskip("libvirt")
    made: list[Qemu] = []

    def start(sim: Path) -> Qemu:
        q = Qemu(sim)
        made.append(q)
        return q

    yield start
    for q in made:
        q.close()


def test_hgx_a100_xid95_cures_gpu3_alone(tmp_path: Path, qemu: Any) -> None:
    sim = make_sim(tmp_path / "hgx", "hgx-a100")
    ok(sim, "partition", "gpu3", "--mig", "3g.20gb,2g.10gb,1g.5gb")
    ok(sim, "partition", "gpu2", "--mig", "3g.20gb")
    ok(sim, "sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci")
    world = qemu(sim)
    world.define("vm-nic", ["0000:05:00.2"])  # another device's VF, in a running domain
    tenant = subprocess.Popen(["sleep", "60"])  # the QoS tenant's process (a container's, say) on gpu3
    qos = sim / "etc" / "vgpukit" / "qos.yaml"
    qos.write_text(
        "gpus:\n  gpu3:\n    policy: fixed-share\n    tenants:\n"
        f"      web: {{class: online, share: 60, pids: [{tenant.pid}]}}\n"
    )
    before = gpus(sim)
    nic_before = ok(sim, "sriov", "list", "nic0")
    vm_pid = world.pid("vm-nic")
    assert invoke(sim, "sim", "fault", "xid", "gpu3", "95").exit_code == 0
    assert invoke(sim, "partition", "gpu3", "--mig", "1g.5gb").exit_code == 6  # unusable: nothing placed on it

    plan = ok(sim, "remediate", "gpu3", "--connect", URI, "--dry-run")
    assert {h["kind"] for h in plan["holders"]} == {"tenant"} and plan["holders"][0]["pid"] == tenant.pid
    assert len(plan["rebuild"]) == 4 and plan["action"] == "reset" and plan["reset_method"] == "nvidia-smi"
    assert "NVML recovery action 1 (GPU_RESET)" in plan["action_source"]

    def end() -> None:  # the tenant's work ends while the drain waits for it (and its parent reaps it)
        tenant.terminate()
        tenant.wait()

    threading.Timer(1.0, end).start()
    done = ok(sim, "remediate", "gpu3", "--connect", URI, "--timeout", "30")
    assert done["changed"] and done["plan"][-1].startswith("release gpu3")

    after = gpus(sim)
    g3, b3 = after[3], before[3]
    assert layout(g3) == layout(b3) and g3["uuid"] == b3["uuid"] and g3["mig_current"]
    assert mig_uuids(g3).isdisjoint(mig_uuids(b3))  # the driver's new MIG devices (CDI specs follow)
    assert g3["resets"] == 1 and g3["persistence"] is True  # persistence mode off for the reset, back on
    assert [g for i, g in enumerate(after) if i != 3] == [g for i, g in enumerate(before) if i != 3]
    assert ok(sim, "sriov", "list", "nic0") == nic_before
    world.settle()
    assert world.active("vm-nic") and world.pid("vm-nic") == vm_pid and world.starts["vm-nic"] == 1
    assert f"pids: [{tenant.pid}]" in qos.read_text()  # the QoS tenant is as configured
    health = ok(sim, "health")
    assert not health["remediation"]["quarantined"]
    assert [d["state"] for d in health["devices"] if d["device"] == "gpu3"] == ["healthy"]
    assert health["remediation"]["runs"][-1]["outcome"] == "done"
    ok(sim, "partition", "gpu3", "--mig", "1g.5gb")  # usable again: planned (its slices are there)
    assert not (sim / "run" / "vgpukit" / "journal").exists()


def test_t4_mdev_vm_is_shut_down_and_its_vgpus_come_back(tmp_path: Path, qemu: Any) -> None:
    sim = make_sim(tmp_path / "t4", "t4-mdev")
    made = ok(sim, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--count", "2")
    uuids = sorted(v["id"] for v in made["vgpus"])
    world = qemu(sim)
    world.define("vm-t4", uuids)
    other = ok(sim, "vgpu", "create", "gpu1", "--type", "T4-8Q")["vgpus"][0]["id"]
    assert invoke(sim, "sim", "fault", "xid", "gpu0", "95").exit_code == 0
    refused = invoke(sim, "reset", "gpu0")
    assert refused.exit_code == 4 and "VM vm-t4" in refused.stderr and "drain it first" in refused.stderr
    done = ok(sim, "remediate", "gpu0", "--connect", URI, "--vms", "shutdown", "--timeout", "20")
    assert f"shut down VM vm-t4 ({URI})" in done["plan"] and f"start VM vm-t4 again ({URI})" in done["plan"]
    listed = ok(sim, "vgpu", "list")["vgpus"]
    assert sorted(v["id"] for v in listed if v["gpu"] == "0000:3b:00.0") == uuids
    assert other in {v["id"] for v in listed}
    world.settle()
    assert world.active("vm-t4") and world.starts["vm-t4"] == 2  # stopped, then started again
    assert gpus(sim)[0]["resets"] == 1 and gpus(sim)[1].get("resets", 0) == 0


def test_h100_vgpu_vm_is_saved_and_restored(tmp_path: Path, qemu: Any) -> None:
    sim = make_sim(tmp_path / "h100", "h100-vgpu")
    made = ok(sim, "vgpu", "create", "gpu0", "--type", "H100-4C", "--count", "2")
    vfs = sorted(v["id"] for v in made["vgpus"])
    world = qemu(sim)
    world.define("vm-h100", [vfs[0]])
    before = ok(sim, "vgpu", "list")
    assert invoke(sim, "sim", "fault", "xid", "gpu0", "95").exit_code == 0
    done = ok(sim, "remediate", "gpu0", "--connect", URI, "--vms", "managedsave", "--timeout", "20")
    assert f"save VM vm-h100 ({URI})" in done["plan"]
    assert any("32 VFs on nvidia" in piece for piece in done["rebuild"])
    after = ok(sim, "vgpu", "list")
    keep = ("id", "gpu", "interface", "type_id", "name", "parent", "vf")  # the IOMMU group is the kernel's
    assert [{k: g[k] for k in keep} for g in after["vgpus"]] == [{k: g[k] for k in keep} for g in before["vgpus"]]
    world.settle()
    assert world.active("vm-h100") and world.starts["vm-h100"] == 2


def test_xid79_is_quarantined_drained_and_escalated_once(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "hgx", "hgx-a100")
    assert invoke(sim, "sim", "fault", "xid", "gpu5", "79").exit_code == 0
    r = invoke(sim, "remediate", "gpu5", "--json")
    assert r.exit_code == 5, r.stderr
    doc = json.loads(r.stdout)
    assert doc["escalate"] == "reboot" and not any(s["kind"] == "remedy-reset" for s in doc["steps"])
    assert r.stderr.startswith("vgpukit: error: gpu5 (0000:84:00.0) needs a reboot: quarantined and drained")
    assert invoke(sim, "release", "gpu5").exit_code == 0
    human = invoke(sim, "remediate", "gpu5")  # the escalation said once: the one-line error
    assert human.exit_code == 5 and (human.stdout + human.stderr).count("needs a reboot") == 1, human.stdout
    assert invoke(sim, "reset", "gpu5").exit_code == 5  # a reset does not cure a GPU that fell off the bus
    assert gpus(sim)[5].get("resets", 0) == 0
    q = json.loads((sim / "var/lib/vgpukit/quarantine/0000:84:00.0.json").read_text())
    assert q["evict"] and q["action"] == "reboot"
    policy = tmp_path / "policy.yaml"
    policy.write_text("per-device: {runs: 5, hours: 1}\n")
    first = invoke(sim, "remediate", "--auto", "--policy", str(policy), "--for", "0", "--json")
    again = invoke(sim, "remediate", "--auto", "--policy", str(policy), "--for", "0", "--json")
    assert first.exit_code == 0 and again.exit_code == 0, first.stderr + again.stderr
    assert again.stdout == "" and gpus(sim)[5].get("resets", 0) == 0  # raised once, never a reset loop
    scrape = invoke(sim, "exporter", "--once").stdout
    assert "vgpukit_remediation_escalations_total{Hostname=" in scrape and 'action="reboot"' in scrape
    assert "# TYPE vgpukit_remediation_escalations_total counter" in scrape
    assert "vgpukit_remediation_runs_total{" in scrape
    assert "vgpukit_remediation_quarantined{" in scrape and 'device="gpu5"' in scrape


def test_reset_is_refused_while_held_and_names_the_holders(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "hgx", "hgx-a100")
    ok(sim, "partition", "gpu1", "--mig", "3g.20gb")
    pid = invoke(sim, "sim", "client", "add", "1", "trainer", "--gi", "2").stdout.strip()
    r = invoke(sim, "reset", "gpu1")
    assert r.exit_code == 4 and f"process trainer (pid {pid}) on gpu1 (0000:04:00.0) GI 2" in r.stderr, r.stderr
    assert gpus(sim)[1].get("resets", 0) == 0
