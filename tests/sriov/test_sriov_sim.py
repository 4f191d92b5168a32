"""SR-IOV commands on the simulated hgx-a100 host (ConnectX-6 PFs with 16 VFs each)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from tests.conftest import Run, as_json, sim_host
from vgpukit.engine import Env, execute
from vgpukit.errors import HostIOError
from vgpukit.host import Host
from vgpukit.pci import virtfns
from vgpukit.sim.kernel import SimKernel
from vgpukit.sriov import planner

NIC0 = "0000:05:00.0"


def state(root: Path) -> dict[str, object]:
    """Everything an SR-IOV command may change on nic0, to compare before/after."""
    h = sim_host(root)
    pf = h.pci_device(NIC0)
    vfs = virtfns(h, NIC0)
    return {
        "numvfs": h.read(pf / "sriov_numvfs"),
        "autoprobe": h.read(pf / "sriov_drivers_autoprobe"),
        "vfs": [
            (v, h.link_name(h.pci_device(v, "driver")), h.read_opt(h.pci_device(v, "driver_override"))) for v in vfs
        ],
        "records": sorted(h.listdir(h.state_dir("bind"))),
    }


class FailingKernel:
    """The simulated kernel, except that the Nth write to a file named ``name`` fails with EIO."""

    def __init__(self, root: Path, name: str, nth: int) -> None:
        self.inner = SimKernel(root)
        self.name, self.nth, self.seen = name, nth, 0

    def write(self, path: Path, data: str) -> None:
        if path.name == self.name:
            self.seen += 1
            if self.seen == self.nth:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        self.inner.write(path, data)


def test_list_shows_every_pf(sim_dir: Path, run_cli: Run) -> None:
    r = run_cli(sim_dir, "sriov", "list", "--json")
    assert r.exit_code == 0, r.output
    pfs = as_json(r)["pfs"]
    assert [p["alias"] for p in pfs] == ["nic0", "nic1", "nic2", "nic3"]
    assert all(p["total_vfs"] == 16 and p["num_vfs"] == 0 and p["vf_device"] == "101c" for p in pfs)
    human = run_cli(sim_dir, "sriov", "list")
    assert "nic0" in human.output and "mlx5_core" in human.output


def test_enable_default_driver_binds_vfs_to_the_vf_driver(sim_dir: Path, run_cli: Run) -> None:
    r = run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "4", "--json")
    assert r.exit_code == 0, r.output
    vfs = as_json(r)["pf"]["vfs"]
    assert [v["bdf"] for v in vfs] == ["0000:05:00.2", "0000:05:00.3", "0000:05:00.4", "0000:05:00.5"]
    assert {v["driver"] for v in vfs} == {"mlx5_core"}


def test_sixteen_vfs_to_vfio_then_disable_leaves_nothing_stale(sim_dir: Path, run_cli: Run) -> None:
    r = run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "16", "--driver", "vfio-pci", "--json")
    assert r.exit_code == 0, r.output
    assert {v["driver"] for v in as_json(r)["pf"]["vfs"]} == {"vfio-pci"}
    assert len(state(sim_dir)["records"]) == 16  # type: ignore[arg-type]
    r = run_cli(sim_dir, "sriov", "disable", "nic0", "--json")
    assert r.exit_code == 0 and as_json(r)["pf"]["num_vfs"] == 0, r.output
    assert state(sim_dir)["records"] == []
    assert not any(n.isdigit() for n in os.listdir(sim_dir / "dev" / "vfio"))


def test_partial_failure_while_binding_16_vfs_rolls_everything_back(sim_dir: Path) -> None:
    before = state(sim_dir)
    host = Host(sim_dir, kernel=FailingKernel(sim_dir, "drivers_probe", nth=9))
    steps = planner.plan(planner.Facts(host), planner.EnableRequest(NIC0, 16, "vfio-pci", timeout=5))
    with pytest.raises(HostIOError) as info:
        execute(Env(host), steps)
    assert "EIO" in str(info.value) and "rolled back" in str(info.value)
    assert state(sim_dir) == before


def test_failure_while_changing_the_count_restores_the_old_vfs(sim_dir: Path, run_cli: Run) -> None:
    assert run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "4", "--driver", "vfio-pci").exit_code == 0
    before = state(sim_dir)
    host = Host(sim_dir, kernel=FailingKernel(sim_dir, "drivers_probe", nth=3))
    steps = planner.plan(planner.Facts(host), planner.EnableRequest(NIC0, 8, "vfio-pci", timeout=5))
    with pytest.raises(HostIOError, match="rolled back"):
        execute(Env(host), steps)
    assert state(sim_dir) == before


def test_cli_reports_failure_and_exit_code(sim_dir: Path, run_cli: Run) -> None:
    r = run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "17", "--json")
    assert r.exit_code == 2 and "at most 16" in as_json(r)["message"]
    r = run_cli(sim_dir, "sriov", "enable", "gpu0", "--vfs", "1")
    assert r.exit_code == 5 and "no SR-IOV" in r.output
    r = run_cli(sim_dir, "sriov", "enable", "nic9", "--vfs", "1")
    assert r.exit_code == 3 and "no nic9" in r.output
    r = run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "0")
    assert r.exit_code == 2 and "sriov disable" in r.output
    r = run_cli(sim_dir, "bind", "nic0")
    assert r.exit_code == 2


def test_dry_run_changes_nothing(sim_dir: Path, run_cli: Run) -> None:
    before = state(sim_dir)
    r = run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "3", "--driver", "vfio-pci", "--dry-run", "-v")
    assert r.exit_code == 0 and "dry run" in r.output and "bind VF 2 (0000:05:00.4) to vfio-pci" in r.output
    assert state(sim_dir) == before


def test_bind_restores_the_remembered_driver(sim_dir: Path, run_cli: Run) -> None:
    assert run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "2").exit_code == 0
    vf = "0000:05:00.2"
    r = run_cli(sim_dir, "bind", vf, "--driver", "vfio-pci", "--json")
    assert r.exit_code == 0, r.output
    doc = as_json(r)
    assert doc["device"]["driver"] == "vfio-pci" and doc["device"]["remembered"]["driver"] == "mlx5_core"
    again = run_cli(sim_dir, "bind", vf, "--driver", "vfio-pci", "--json")
    assert as_json(again)["plan"] == []
    r = run_cli(sim_dir, "bind", vf, "--restore", "--json")
    assert r.exit_code == 0 and as_json(r)["device"]["driver"] == "mlx5_core", r.output
    assert as_json(r)["device"]["driver_override"] is None
    r = run_cli(sim_dir, "unbind", vf, "--json")
    assert r.exit_code == 0 and as_json(r)["device"]["driver"] is None
    r = run_cli(sim_dir, "bind", vf, "--restore", "--json")
    assert as_json(r)["device"]["driver"] == "mlx5_core"


def test_bind_warns_about_group_members_not_on_vfio(tmp_path: Path, run_cli: Run) -> None:
    from tests.conftest import make_sim

    root = make_sim(tmp_path / "h")
    h = sim_host(root)
    gpu = "0000:03:00.0"
    # put another endpoint in gpu0's IOMMU group, as an ACS-less switch would
    group = h.link_name(h.pci_device(gpu, "iommu_group"))
    assert group is not None
    nvme = "0000:06:00.0"
    members = root / "sys" / "kernel" / "iommu_groups" / group / "devices"
    os.symlink(os.path.relpath(os.path.realpath(h.pci_device(nvme)), members), members / nvme)
    r = run_cli(root, "bind", "gpu0", "--driver", "vfio-pci", "--json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert any(nvme in w and "whole groups" in w for w in doc["warnings"])


def test_in_use_by_mdev_or_vgpu_blocks_disable(sim_dir: Path, run_cli: Run) -> None:
    assert run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "2").exit_code == 0
    h = sim_host(sim_dir)
    vf_dir = Path(os.path.realpath(h.pci_device("0000:05:00.3")))
    (vf_dir / "nvidia").mkdir()
    (vf_dir / "nvidia" / "current_vgpu_type").write_text("1414\n")
    doc = as_json(run_cli(sim_dir, "sriov", "list", "nic0", "--json"))
    assert doc["pfs"][0]["vfs"][1]["users"] == [{"kind": "vgpu", "ref": "1414", "detail": ""}]
    r = run_cli(sim_dir, "sriov", "disable", "nic0")
    assert r.exit_code == 4 and "vGPU type 1414" in r.output
    (vf_dir / "nvidia" / "current_vgpu_type").write_text("0\n")
    (vf_dir / "6f1c1e4e-6a8f-4d0e-9b1e-3c2f7a9d8e01").mkdir()
    r = run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "1")
    assert r.exit_code == 4 and "carries mdev" in r.output
    r = run_cli(sim_dir, "sriov", "disable", "nic0", "--force")
    assert r.exit_code == 0 and state(sim_dir)["numvfs"] == "0"


def test_held_vf_blocks_unbind_and_restore_unless_forced(sim_dir: Path, run_cli: Run) -> None:
    assert run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "1", "--driver", "vfio-pci").exit_code == 0
    assert run_cli(sim_dir, "sim", "hold", "0000:05:00.2").exit_code == 0
    r = run_cli(sim_dir, "bind", "0000:05:00.2", "--restore")
    assert r.exit_code == 4 and "held open by pid" in r.output
    r = run_cli(sim_dir, "unbind", "0000:05:00.2")
    assert r.exit_code == 4
    r = run_cli(sim_dir, "bind", "0000:05:00.2", "--restore", "--force", "--json")
    assert r.exit_code == 0 and as_json(r)["device"]["driver"] == "mlx5_core"  # the kernel default, via probe


def test_vf_assigned_to_a_libvirt_domain_is_in_use(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    pytest.importorskip("libvirt")
    node = tmp_path / "node.xml"
    node.write_text(
        "<node><domain type='kvm'><name>web1</name><memory unit='MiB'>1024</memory>"
        "<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>"
        "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
        "<address domain='0x0000' bus='0x05' slot='0x00' function='0x3'/></source></hostdev>"
        "</devices></domain></node>"
    )
    uri = f"test://{node}"
    assert run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "2").exit_code == 0
    doc = as_json(run_cli(sim_dir, "sriov", "list", "nic0", "--libvirt", uri, "--json"))
    assert [v["in_use"] for v in doc["pfs"][0]["vfs"]] == [False, True]
    assert doc["pfs"][0]["vfs"][1]["users"][0] == {"kind": "libvirt", "ref": "web1", "detail": "running"}
    r = run_cli(sim_dir, "sriov", "disable", "nic0", "--libvirt", uri)
    assert r.exit_code == 4 and "libvirt domain web1" in r.output


def test_vf_assigned_as_hostdev_interface_or_in_a_stopped_domain_is_in_use(
    sim_dir: Path, run_cli: Run, tmp_path: Path
) -> None:
    """What vgpukit attach writes for a NIC VF (<interface type='hostdev'>) is an assignment too,
    and so is a device in the definition of a domain that is not running."""
    pytest.importorskip("libvirt")
    node = tmp_path / "node.xml"
    node.write_text(
        "<node><domain type='kvm'><name>web1</name><memory unit='MiB'>1024</memory>"
        "<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>"
        "<interface type='hostdev' managed='yes'><mac address='52:54:00:00:00:01'/><source>"
        "<address type='pci' domain='0x0000' bus='0x05' slot='0x00' function='0x2'/></source></interface>"
        "</devices></domain>"
        "<domain type='kvm' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'><name>idle</name>"
        "<memory unit='MiB'>1024</memory><os><type arch='x86_64' machine='q35'>hvm</type></os><devices>"
        "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
        "<address domain='0x0000' bus='0x05' slot='0x00' function='0x3'/></source></hostdev>"
        "</devices><test:runstate>5</test:runstate></domain></node>"
    )
    uri = f"test://{node}"
    assert run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "2").exit_code == 0
    doc = as_json(run_cli(sim_dir, "sriov", "list", "nic0", "--libvirt", uri, "--json"))
    vfs = doc["pfs"][0]["vfs"]
    assert [v["in_use"] for v in vfs] == [True, True]
    assert vfs[0]["users"] == [{"kind": "libvirt", "ref": "web1", "detail": "running"}]
    assert vfs[1]["users"] == [{"kind": "libvirt", "ref": "idle", "detail": "defined"}]
    r = run_cli(sim_dir, "sriov", "disable", "nic0", "--libvirt", uri)
    assert r.exit_code == 4 and "libvirt domain web1" in r.output
    assert state(sim_dir)["numvfs"] == "2"


def test_restore_without_record_is_idempotent(sim_dir: Path, run_cli: Run) -> None:
    r = run_cli(sim_dir, "bind", "gpu0", "--restore", "--json")
    assert r.exit_code == 0 and as_json(r)["plan"] == [] and as_json(r)["device"]["driver"] == "nvidia"
    # moved by hand (not through vgpukit): restore clears the override and lets the kernel choose
    h = sim_host(sim_dir)
    gpu = "0000:03:00.0"
    h.write(h.pci_device(gpu, "driver_override"), "vfio-pci")
    h.write(h.pci_driver("nvidia", "unbind"), gpu)
    h.write(h.sys("bus", "pci", "drivers_probe"), gpu)
    r = run_cli(sim_dir, "bind", "gpu0", "--restore", "--json")
    assert r.exit_code == 0 and as_json(r)["device"]["driver"] == "nvidia", r.output
    assert as_json(r)["device"]["driver_override"] is None
