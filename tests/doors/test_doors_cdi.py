"""The CDI rules (vgpukit/cdi/planner.py) through every door: the spec files follow a change the same
way whichever door made it.

No host config has a ``cdi:`` section (``cdi enable`` is the host's one-time choice, docs/cdi.md), so
the CDI planner is reached through the doors by its ``Refresh`` request: after every change the
engine makes, the enabled specs that no longer describe the host are rewritten in the same journaled
run. Each row enables some classes on a fresh host, makes one change through one door (the area
command, ``apply``, the node agent's apply, the Ansible module) and compares the spec files left:
the same files, the same content, through every door. Refusals leave the specs alone like the rest
of the host (every row of the other door tests runs through :func:`tests.doors.harness.every_door`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import invoke, make_sim
from tests.doors import harness
from tests.qos.conftest import DaemonProc

SPECS = ("etc/cdi/", "var/run/cdi/")


def specs(sim: Path) -> dict[str, str]:
    """The spec files under a simulated host (the host's root, in its device paths, as ``<root>``)."""
    return {
        str(p.relative_to(sim)): p.read_text().replace(str(sim), "<root>")
        for p in sorted(sim.rglob("*"))
        if p.is_file() and str(p.relative_to(sim)).startswith(SPECS)
    }


def through_every_door(tmp: Path, profile: str, setup: list[list[str]], area: list[str], config: str) -> list[dict]:  # type: ignore[type-arg]
    """The spec files after the change, per door (each on a fresh host of ``profile`` after ``setup``)."""
    path = harness.host_config(tmp, config)
    doors = {"area": lambda s: harness.area(s, area), **harness.config_doors(path, tmp)}
    out = []
    for name, door in doors.items():
        sim = make_sim(tmp / name, profile)
        for args in setup:
            r = invoke(sim, *args)
            assert r.exit_code == 0, (args, r.stderr)
        answer = door(sim)
        assert answer.code == 0, answer
        out.append(specs(sim))
    return out


def test_the_vf_spec_follows_sriov_through_every_door(tmp_path: Path) -> None:
    got = through_every_door(
        tmp_path,
        "hgx-a100",
        [["cdi", "enable", "--class", "vf"]],
        ["sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci"],
        "sriov:\n  - {device: nic0, vfs: 2, driver: vfio-pci}",
    )
    assert all(g == got[0] for g in got[1:]), got
    devices = yaml.safe_load(got[0]["etc/cdi/vgpukit-vf.yaml"])["devices"]
    assert len([d for d in devices if d["name"] != "all"]) == 2


@pytest.fixture
def sleeper() -> Iterator[int]:
    p = subprocess.Popen(["sleep", "300"])
    yield p.pid
    p.kill()
    p.wait()


def test_the_gpu_share_spec_follows_the_qos_tenants_through_the_area_command_and_apply(
    tmp_path: Path, sleeper: int
) -> None:
    """``qos tenant add`` (through the daemon, then the engine's refresh) and ``apply``'s ``qos:`` leave
    the same gpu-share spec: one device per tenant."""
    got = []
    for door in ("area", "apply"):
        sim = make_sim(tmp_path / door, "hgx-a100")
        lib = sim / "usr/lib/vgpukit/libvgpukit-cuda.so"
        lib.parent.mkdir(parents=True)
        lib.write_text("library\n")
        assert invoke(sim, "cdi", "enable", "--class", "gpu-share").exit_code == 0
        daemon = DaemonProc(sim, sim=True).start()  # running on both hosts: its demand socket is in the spec
        try:
            if door == "area":
                add = ["gpu0", "t1", "--class", "online", "--share", "40", "--pid", str(sleeper)]
                r = invoke(sim, "qos", "tenant", "add", *add)
            else:
                tenant = {"class": "online", "share": 40, "pids": [sleeper]}
                doc = {"qos": {"gpus": {"gpu0": {"tenants": {"t1": tenant}}}}}
                path = harness.host_config(tmp_path, yaml.safe_dump(doc, default_flow_style=True))
                r = invoke(sim, "apply", "-f", str(path), "-c", harness.CONFIG)
        finally:
            daemon.stop()
        assert r.exit_code == 0, r.stderr
        got.append(specs(sim))
    assert got[0] == got[1], got
    dev = yaml.safe_load(got[0]["etc/cdi/vgpukit-gpu-share.yaml"])["devices"][0]
    assert dev["name"] == "t1"
