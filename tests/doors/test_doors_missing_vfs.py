"""VFs a PF reset took away are re-created through every door (issue 35 §0): the area command, apply,
the node agent's apply and the Ansible module plan the same repair (through 0, as the kernel
requires) and leave the same host: before, ``sriov enable`` said "nothing to do" and apply's door
refused a GPU's ("unusable: VFs configured but missing")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from tests.doors import harness

CASES = {
    # profile, PF, its name, the VFs, the driver they are on
    "nic": ("hgx-a100", "0000:25:00.0", "nic1", 2, "vfio-pci"),
    "gpu": ("h100-vgpu", "0000:41:00.0", "gpu0", 32, "default"),
}


def _host(tmp: Path, case: str, door: str) -> Path:
    profile, pf, name, vfs, driver = CASES[case]
    sim = make_sim(tmp / f"{case}-{door}", profile)
    if profile == "hgx-a100":
        assert invoke(sim, "sriov", "enable", name, "--vfs", str(vfs), "--driver", driver).exit_code == 0
    assert invoke(sim, "health").exit_code == 0
    assert invoke(sim, "sim", "fault", "pf-reset", pf).exit_code == 0
    return sim


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_repair_is_the_same_through_every_door(tmp_path: Path, case: str) -> None:
    _, pf, name, vfs, driver = CASES[case]
    area_argv = ["sriov", "enable", name, "--vfs", str(vfs), "--driver", driver]
    config = harness.host_config(tmp_path, f"sriov:\n  - {{device: {name}, vfs: {vfs}, driver: {driver}}}")
    sim = _host(tmp_path, case, "plans")
    apply_argv = ["apply", "-f", str(config), "-c", harness.CONFIG, "--dry-run", "--json"]
    planned = {
        "area": json.loads(invoke(sim, *area_argv, "--dry-run", "--json").stdout)["plan"],
        "apply": json.loads(invoke(sim, *apply_argv).stdout)["plan"],
    }
    assert planned["area"] == planned["apply"] and planned["area"][0].startswith(f"destroy the {vfs} VFs of {pf}")
    doors = {"area": lambda s: harness.area(s, area_argv), **harness.config_doors(config, tmp_path)}
    states = {}
    for door, run in doors.items():
        sim = _host(tmp_path, case, door)
        answer = run(sim)
        assert (answer.code, answer.kind) == (0, None), answer
        pf_doc = json.loads(invoke(sim, "sriov", "list", name, "--json").stdout)["pfs"][0]
        assert (pf_doc["missing_vfs"], len(pf_doc["vfs"])) == (0, vfs), door
        states[door] = sorted((v["bdf"], v["driver"]) for v in pf_doc["vfs"])
        assert invoke(sim, "health", pf).exit_code == 0, door
    assert len({json.dumps(s) for s in states.values()}) == 1, states
