"""The quarantine rule through every door (issue 35): no door places work on a quarantined device.

``vgpukit quarantine DEVICE`` is a host fact (``/var/lib/vgpukit/quarantine/<bdf>.json``) each area's
planner reads: ``partition`` and ``apply``'s ``mig:``, ``sriov enable`` and ``sriov:``, ``qos tenant
add`` and ``qos:`` (a new tenant), ``vgpu create`` / ``mdev create`` and the mdevctl shim's ``start``,
``attach`` (and ``render domain``, which warns) all refuse with the quarantine's reason: exit 6, error
kind ``unusable``, the same message through each door, the host unchanged (a config door leaves the
device alone and applies the rest: the one predicate of vgpukit/exclusion.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import invoke, make_sim
from tests.doors import harness
from tests.doors.test_doors_health import ONLY_GPU0

REASON = "XID 95 on the bench"


def quarantine(sim: Path, device: str) -> None:
    r = invoke(sim, "quarantine", device, "--reason", REASON)
    assert r.exit_code == 0, r.stderr


def refused_alike(answers: list[harness.Answer], says: str) -> None:
    for answer in answers:
        assert (answer.code, answer.kind) == (6, "unusable"), answer
        assert says in answer.message, answer


def test_mig_onto_a_quarantined_gpu(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    quarantine(sim, "gpu0")
    answers = harness.every_door(
        sim, tmp_path, "mig: gpu0-3g", ["partition", "gpu0", "--mig", "3g.20gb"], top=ONLY_GPU0
    )
    refused_alike(answers, f"gpu0 (0000:03:00.0) is quarantined: {REASON}")
    assert answers[0].line.endswith("(release it with: vgpukit release gpu0)")


def test_vfs_out_of_a_quarantined_pf(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    quarantine(sim, "nic0")
    answers = harness.every_door(
        sim, tmp_path, "sriov:\n  - {device: nic0, vfs: 2}", ["sriov", "enable", "nic0", "--vfs", "2"]
    )
    refused_alike(answers, f"nic0 (0000:05:00.0) is quarantined: {REASON}")


def test_a_qos_tenant_on_a_quarantined_gpu(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    quarantine(sim, "gpu0")
    p = subprocess.Popen(["sleep", "300"])
    try:
        config = f"qos:\n  gpus:\n    gpu0:\n      tenants:\n        web: {{class: online, share: 50, pids: [{p.pid}]}}"
        area = ["qos", "tenant", "add", "gpu0", "web", "--class", "online", "--share", "50", "--pid", str(p.pid)]
        answers = harness.every_door(sim, tmp_path, config, area)
    finally:
        p.kill()
        p.wait()
    refused_alike(answers, f"gpu0 (0000:03:00.0) is quarantined: {REASON}")


def test_an_mdev_or_vgpu_on_a_quarantined_gpu(tmp_path: Path) -> None:
    """``mdev create`` and the mdevctl shim, ``vgpu create``, and the config doors' ``mdev:`` and ``vgpu:``
    sections (through the fleet planner's one predicate, vgpukit/exclusion.py)."""
    sim = make_sim(tmp_path / "host", "t4-mdev")
    quarantine(sim, "gpu0")
    says = f"gpu0 (0000:3b:00.0) is quarantined: {REASON}"
    mdev = harness.every_door(
        sim,
        tmp_path,
        "mdev:\n  - {parent: 0000:3b:00.0, type: nvidia-232, count: 1}",
        ["mdev", "create", "0000:3b:00.0", "nvidia-232"],
        ["start", "-p", "0000:3b:00.0", "-t", "nvidia-232"],
    )
    refused_alike(mdev, says)
    vgpu = harness.every_door(
        sim, tmp_path, "vgpu:\n  - {device: gpu0, type: T4-4Q, count: 1}", ["vgpu", "create", "gpu0", "--type", "T4-4Q"]
    )
    refused_alike(vgpu, says)
    assert harness.area(sim, ["mdev", "create", "0000:d8:00.0", "nvidia-232"]).code == 0  # gpu1 is not


def test_a_vf_of_a_quarantined_pf_goes_to_no_vm(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci").exit_code == 0
    quarantine(sim, "nic0")
    before = harness.host_state(sim)
    refused = harness.area(sim, ["attach", "vm1", "0000:05:00.2", "--connect", "test:///default"])
    render = ["render", "domain", "--name", "v", "--memory", "1G", "--vcpus", "1", "--device", "0000:05:00.2", "--json"]
    r = invoke(sim, *render)
    assert r.exit_code == 0 and harness.host_state(sim) == before, r.stderr
    refused_alike([refused], f"0000:05:00.2 is quarantined: {REASON} (carved from nic0, quarantined)")
    assert refused.line.removeprefix("vgpukit: error: ") in json.loads(r.stdout)["warnings"]
