"""Real kernel only: the CLI as a process (``python -m vgpukit``) in a freshly booted guest, mtty smoke.

``GUEST_STEPS`` run in the guest before the in-guest pytest cases (see conftest.py), so they see the
machine exactly as it booted.
"""

from __future__ import annotations

import os

import pytest

from .conftest import GuestSession
from .harness import skip_or_fail
from .targets import PF, PF_IDS, TOTAL_VFS, Target

pytestmark = pytest.mark.realkernel  # every case here needs the guest

GUEST_STEPS = [
    ("cli-topo", "vgpukit", ("topo", "--json")),
    ("cli-enable", "vgpukit", ("sriov", "enable", "nvme0", "--vfs", "3", "--driver", "vfio-pci", "--json")),
    ("mdev-bus", "sh", ("ls /sys/class/mdev_bus/ && ls /sys/class/mdev_bus/mtty/mdev_supported_types",)),
]


def _walk(nodes: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for n in nodes:
        out.append(n)
        out += _walk(n.get("children", []))
    return out


def test_topo_json_sees_the_sriov_nvme(guest: GuestSession) -> None:
    r = guest.step("cli-topo")
    assert r.rc == 0, r.describe()
    devices = {d["bdf"]: d for root in r.json()["roots"] for d in _walk(root["children"])}
    pf = devices[PF]
    assert pf["ids"] == PF_IDS and pf["driver"] == "nvme" and pf["alias"] == "nvme0"
    assert pf["sriov"]["total_vfs"] == TOTAL_VFS and pf["sriov"]["num_vfs"] == 0
    assert pf["iommu_group"] is not None


def test_enable_as_a_process(guest: GuestSession) -> None:
    enable = guest.step("cli-enable")
    assert enable.rc == 0, enable.describe()
    pf = enable.json()["pf"]
    assert [v["driver"] for v in pf["vfs"]] == ["vfio-pci"] * 3
    assert pf["autoprobe"] is True and len({v["iommu_group"] for v in pf["vfs"]}) == 3


def test_mtty_parent_registered(guest: GuestSession) -> None:
    if not guest.mtty:
        skip_or_fail("mtty could not be built here (see the harness notes)")
    r = guest.step("mdev-bus")
    assert r.rc == 0, r.describe()
    assert "mtty" in r.stdout.split() and "mtty-1" in r.stdout and "mtty-2" in r.stdout


def test_vfio_group_node_follows_the_vf(real_target: Target) -> None:
    """In the guest: /dev/vfio/<group> appears with vfio-pci and goes away with the VF."""
    t = real_target
    assert t.cli("sriov", "enable", PF, "--vfs", "1", "--driver", "vfio-pci").rc == 0
    vf = "0000:00:02.1"
    node = t.vfio_node(vf)
    assert os.path.exists(node) and t.driver(vf) == "vfio-pci"
    assert t.cli("sriov", "disable", PF).rc == 0
    assert not os.path.exists(node)
