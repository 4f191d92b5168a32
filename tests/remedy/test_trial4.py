"""The fourth new-user trial's findings about remediation (issue 35): each test failed before its fix."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from tests.conftest import invoke, make_sim

Q = "var/lib/vgpukit/quarantine"


def ok(sim: Path, *args: str) -> dict[str, object]:
    r = invoke(sim, *args, "--json")
    assert r.exit_code == 0, (args, r.stderr)
    return json.loads(r.stdout)


def mig_uuids(sim: Path, gpu: str) -> list[str]:
    r = invoke(sim, "mig", "status", gpu, "--json")
    assert r.exit_code == 0, r.stderr
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, str) and node.startswith("MIG-") and node not in found:
            found.append(node)

    walk(json.loads(r.stdout))
    return found


def test_h1_no_qos_tenant_on_a_mig_slice_of_a_quarantined_gpu(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    ok(sim, "partition", "gpu3", "--mig", "1g.5gb")
    slice_ = mig_uuids(sim, "gpu3")[0]
    ok(sim, "quarantine", "gpu3", "--reason", "t")
    add = ["qos", "tenant", "add", slice_, "z", "--class", "online", "--share", "10", "--pid", str(os.getpid())]
    r = invoke(sim, *add)
    assert r.exit_code == 6 and "quarantined" in r.stderr and "carved from gpu3" in r.stderr, (r.exit_code, r.stderr)


def test_h3_the_simulator_has_a_boot_id_a_reboot_changes(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    boot = sim / "proc/sys/kernel/random/boot_id"
    first = boot.read_text().strip()
    assert len(first) == 36
    policy = tmp_path / "policy.yaml"
    policy.write_text("start: {reboot: quarantine}\n")
    auto = ["remediate", "--auto", "--policy", str(policy), "--for", "0", "--json"]
    assert invoke(sim, "sim", "fault", "xid", "gpu5", "79").exit_code == 0
    assert invoke(sim, *auto).exit_code == 0
    assert json.loads((sim / Q / "0000:84:00.0.json").read_text())["boot_id"] == first
    assert invoke(sim, "sim", "reboot").exit_code == 0
    assert boot.read_text().strip() not in ("", first)
    again = [json.loads(line) for line in invoke(sim, *auto).stdout.splitlines()]
    assert [(e["device"], e["what"], e["outcome"]) for e in again] == [("gpu5", "release", "done")]
    assert not (sim / Q / "0000:84:00.0.json").exists()


def test_m2_a_rolled_back_drain_says_the_quarantine_stays_and_why(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    ok(sim, "bind", "gpu4", "--driver", "vfio-pci")
    assert invoke(sim, "sim", "hold", "gpu4", "--vm", "w4").exit_code == 0
    assert invoke(sim, "sim", "fault", "aer", "gpu4", "fatal").exit_code == 0
    r = invoke(sim, "remediate", "gpu4", "--timeout", "0.5", "--connect", "test:///default")
    assert r.exit_code == 4 and "rolled back" in r.stderr, r.stderr
    assert "gpu4 (0000:83:00.0) stays quarantined: it is not healthy" in r.stderr, r.stderr
    assert (sim / Q / "0000:83:00.0.json").exists()


def test_m3_quarantine_again_or_drain_keeps_the_operators_reason(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    ok(sim, "quarantine", "gpu2", "--reason", "other")
    assert ok(sim, "quarantine", "gpu2")["plan"] == []  # no --reason: the one it has
    assert json.loads((sim / Q / "0000:23:00.0.json").read_text())["reason"] == "other"
    ok(sim, "quarantine", "gpu3", "--reason", "t")
    ok(sim, "drain", "gpu3", "--vms", "migrate")
    record = json.loads((sim / Q / "0000:24:00.0.json").read_text())
    assert (record["reason"], record["by"], record["evict"]) == ("t", "operator", True)


def test_m4_remediate_keeps_an_operators_quarantine_and_says_so(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "h100-vgpu")
    ok(sim, "quarantine", "gpu0", "--reason", "rma")
    assert invoke(sim, "sim", "fault", "xid", "gpu0", "95").exit_code == 0
    done = ok(sim, "remediate", "gpu0")
    assert any(
        str(s).startswith("keep gpu0 ") and "by the operator: rma" in str(s) and "vgpukit release gpu0" in str(s)
        for s in done["plan"]  # type: ignore[attr-defined]
    ), done["plan"]
    files = list((sim / Q).glob("*.json"))
    assert len(files) == 1
    record = json.loads(files[0].read_text())
    assert (record["reason"], record["by"]) == ("rma", "operator")
    assert invoke(sim, "health", "gpu0").exit_code == 0  # cured: only the operator's word keeps it out


def test_h2_the_qos_tenants_of_a_rebuilt_mig_gpu_follow_their_slices(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    ok(sim, "partition", "gpu3", "--mig", "1g.5gb=3")
    old = mig_uuids(sim, "gpu3")
    web, batch = old[0], old[-1]
    gone = []  # the tenants' processes ended (a drain waits for live ones): the configuration stays
    for _ in range(2):
        p = subprocess.Popen(["true"])
        p.wait()
        gone.append(p.pid)
    (sim / "etc/vgpukit/qos.yaml").write_text(
        "gpus:\n"
        f"  {web}:\n    tenants:\n      web: {{class: online, share: 50, pids: [{gone[0]}]}}\n"
        f"  {batch}:\n    tenants:\n      batch: {{class: offline, share: 10, pids: [{gone[1]}]}}\n"
    )
    assert invoke(sim, "sim", "fault", "xid", "gpu3", "95").exit_code == 0
    plan = ok(sim, "remediate", "gpu3", "--dry-run")
    rebuilds = [str(r) for r in plan["rebuild"]]  # type: ignore[attr-defined]
    said = f"QoS tenant web on {web} (pids:{gone[0]}), re-keyed to the rebuilt slice's new MIG UUID"
    assert said in rebuilds, rebuilds
    assert any(str(s).startswith("re-key QoS tenants web, batch of gpu3") for s in plan["plan"]), plan["plan"]  # type: ignore[attr-defined]
    r = invoke(sim, "remediate", "gpu3")
    assert r.exit_code == 0, r.stderr
    new = mig_uuids(sim, "gpu3")
    assert len(new) == len(old) and not set(new) & set(old)  # every slice has a new UUID
    text = (sim / "etc/vgpukit/qos.yaml").read_text()
    assert web not in text and batch not in text and new[0] in text and new[-1] in text, text
    keys = {k: list(v["tenants"]) for k, v in yaml.safe_load(text)["gpus"].items()}
    assert keys == {new[0]: ["web"], new[-1]: ["batch"]}  # same placement, same tenant


def test_m1_a_drain_starts_again_only_the_vms_it_stopped_and_names_an_unknown_domain(tmp_path: Path) -> None:
    """The QEMU holding gpu4 names a domain test:///default does not have: the drain stops nothing, says so
    when the time is up, and the run does not fail trying to start it again."""
    from vgpukit.engine import Env, execute
    from vgpukit.errors import InUse
    from vgpukit.host import Host
    from vgpukit.remedy.domains import StartDomain, StopDomain
    from vgpukit.remedy.steps import WaitFree

    sim = make_sim(tmp_path / "h", "hgx-a100")
    ok(sim, "bind", "gpu4", "--driver", "vfio-pci")
    pid = ok(sim, "sim", "hold", "gpu4", "--vm", "w4")["pid"]
    uri = "test:///default"
    stop, start = StopDomain(uri, "w4", "shutdown", 5.0), StartDomain(uri, "w4")
    try:
        execute(Env(Host(sim), command="test"), [stop, WaitFree("0000:83:00.0", "gpu4", 0.3)])
        raise AssertionError("the wait did not refuse")
    except InUse as err:
        assert f"VM w4 (pid {pid})" in err.message and "domain w4 not found on test:///default" in err.message
    assert invoke(sim, "sim", "release", str(pid)).exit_code == 0
    execute(Env(Host(sim), command="test"), [stop, WaitFree("0000:83:00.0", "gpu4", 5.0), start])  # no VM to start


def test_m6_health_shows_the_vfs_of_an_unusable_pf_unusable(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    ok(sim, "sriov", "enable", "nic1", "--vfs", "4")
    ok(sim, "bind", "nic1 vf0", "--driver", "vfio-pci")  # a VF the health layer watches
    assert invoke(sim, "sim", "fault", "aer", "nic1", "fatal").exit_code == 0
    r = invoke(sim, "health", "--json")
    vfs = [d for d in json.loads(r.stdout)["devices"] if d["kind"] == "vf" and d["bdf"].startswith("0000:25:")]
    assert [(d["bdf"], d["state"]) for d in vfs] == [("0000:25:00.2", "unusable")], vfs
    assert vfs[0]["reasons"][0] == "carved from nic1: PCIe AER fatal errors counted", vfs


def test_l5_a_quarantined_gpu_is_refused_first_whatever_it_offers(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")  # no vGPU host driver: gpu2 offers no vGPU types
    ok(sim, "quarantine", "gpu2", "--reason", "t")
    r = invoke(sim, "vgpu", "create", "gpu2", "--type", "x")
    assert r.exit_code == 6 and "quarantined: t" in r.stderr, r.stderr


def test_l7_health_of_one_device_shows_its_remediation_only(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    ok(sim, "quarantine", "gpu2", "--reason", "a")
    ok(sim, "quarantine", "gpu3", "--reason", "b")
    cure = json.loads(invoke(sim, "health", "gpu3", "--json").stdout)["remediation"]
    assert [q["device"] for q in cure["quarantined"]] == ["gpu3"]
    assert {r["device"] for r in cure["runs"]} == {"gpu3"}


def test_l6_auto_lines_say_done_once_and_no_escalation_is_null(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("per-device: {runs: 5, hours: 1}\n")
    auto = ["remediate", "--auto", "--policy", str(policy), "--for", "0"]
    for name, json_out in (("a", True), ("b", False)):
        sim = make_sim(tmp_path / name, "hgx-a100")
        assert invoke(sim, "sim", "fault", "xid", "gpu1", "46").exit_code == 0
        r = invoke(sim, *auto, *(["--json"] if json_out else []))
        assert r.exit_code == 0, r.stderr
        if json_out:
            events = [json.loads(line) for line in r.stdout.splitlines()]
            assert [(e["what"], e["outcome"], e["escalate"]) for e in events] == [("remediate", "done", None)]
        else:
            assert "remediate done: " in r.stdout and r.stdout.count("remediate done") == 1, r.stdout
