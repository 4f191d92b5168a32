"""VFs configured but missing (issue 35 §0): a PF reset took the VFs away while ``sriov_numvfs`` still says
how many (``sim fault pf-reset``). The planners see them as missing and re-create them (through 0, as the
kernel requires) for any PF -- a NIC's, an NVMe controller's, a GPU's with vGPU VFs; ``sriov list``
shows it; ``apply`` of the host's own export repairs; ``assert`` says it does not match; ``health``
names the repair, not a reboot, and ``health PF`` agrees with ``health``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import Run, invoke, make_sim
from tests.core.test_json_schemas import validator

NIC1 = "0000:25:00.0"


def _ok(sim: Path, *args: str) -> str:
    r = invoke(sim, *args)
    assert r.exit_code == 0, (args, r.stderr)
    return r.stdout


def _pf(sim: Path, name: str) -> dict:  # type: ignore[type-arg]
    doc = json.loads(_ok(sim, "sriov", "list", name, "--json"))
    assert not sorted(validator("sriov-list").iter_errors(doc), key=str)
    return doc["pfs"][0]  # type: ignore[no-any-return]


@pytest.fixture
def nic(tmp_path: Path) -> tuple[Path, Path]:
    """hgx-a100: 2 VFs of nic1 on vfio-pci, watched once by health, exported; then the PF reset."""
    sim = make_sim(tmp_path / "h", "hgx-a100")
    _ok(sim, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci")
    _ok(sim, "health")
    path = tmp_path / "exported.yaml"
    path.write_text(_ok(sim, "export"))
    _ok(sim, "sim", "fault", "pf-reset", NIC1)
    return sim, path


def test_sriov_list_shows_the_discrepancy(nic: tuple[Path, Path]) -> None:
    sim, _ = nic
    pf = _pf(sim, "nic1")
    assert (pf["num_vfs"], pf["missing_vfs"], pf["vfs"]) == (2, 2, [])
    out = _ok(sim, "sriov", "list", "nic1")
    assert "2 (2 missing)" in out
    assert "nic1: 2 of 2 VFs missing: re-create them with vgpukit sriov enable nic1 --vfs 2" in out


def test_sriov_enable_recreates_them_through_0(nic: tuple[Path, Path]) -> None:
    sim, _ = nic
    plan = json.loads(_ok(sim, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci", "--dry-run", "--json"))
    assert plan["plan"][0].startswith(f"destroy the 2 VFs of {NIC1} (sriov_numvfs 2 -> 0) (2 of them missing")
    assert plan["plan"][2] == f"create 2 VFs on {NIC1} (sriov_numvfs 0 -> 2) and wait for them"
    _ok(sim, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci")
    pf = _pf(sim, "nic1")
    assert pf["missing_vfs"] == 0 and [v["driver"] for v in pf["vfs"]] == ["vfio-pci", "vfio-pci"]
    assert "nothing to do" in _ok(sim, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci")


def test_assert_says_it_does_not_match_and_apply_of_the_export_repairs(nic: tuple[Path, Path]) -> None:
    sim, path = nic
    r = invoke(sim, "assert", "-f", str(path))
    assert r.exit_code == 1 and "sriov_numvfs 2 -> 0" in r.stdout, r.output
    r = invoke(sim, "apply", "-f", str(path))
    assert r.exit_code == 0, r.output
    assert _pf(sim, "nic1")["missing_vfs"] == 0
    assert invoke(sim, "assert", "-f", str(path)).exit_code == 0
    assert "nothing to do" in _ok(sim, "apply", "-f", str(path))


def test_health_names_the_repair_not_a_reboot(nic: tuple[Path, Path]) -> None:
    sim, _ = nic
    r = invoke(sim, "health", "--json")
    assert r.exit_code == 4  # the VFs themselves are gone: unusable until re-created
    doc = json.loads(r.stdout)
    assert not sorted(validator("health").iter_errors(doc), key=str)
    by = {d["bdf"]: d for d in doc["devices"]}
    want = f"vgpukit sriov enable {NIC1} --vfs 2 --driver vfio-pci (or vgpukit apply of the host config)"
    assert (by[NIC1]["state"], by[NIC1]["action"], by[NIC1]["repair"]) == ("degraded", "recreate-vfs", want)
    for vf in ("0000:25:00.2", "0000:25:00.3"):
        assert (by[vf]["state"], by[vf]["action"], by[vf]["repair"]) == ("unusable", "recreate-vfs", want)
        assert not any(e["kind"] == "pci-gone" for e in by[vf]["events"])
    assert "reboot" not in r.stdout
    one = invoke(sim, "health", NIC1, "--json")  # the PF alone: the same row, its own exit code
    assert one.exit_code == 1 and json.loads(one.stdout)["devices"] == [by[NIC1]]
    assert f"repair: {want}" in invoke(sim, "health").stdout
    _ok(sim, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci")
    assert invoke(sim, "health").exit_code == 0
    assert invoke(sim, "health", NIC1).exit_code == 0


def test_a_link_left_behind_is_not_a_vf(nic: tuple[Path, Path]) -> None:
    """The kernel removes a PF's virtfnN link only when it disables SR-IOV: a VF that went away
    otherwise may leave the link behind, dangling. A VF is there when its function is."""
    sim, _ = nic
    pf_dir = (sim / "sys/bus/pci/devices" / NIC1).resolve()
    os.symlink("../0000:25:00.2", pf_dir / "virtfn0")
    assert _pf(sim, "nic1")["missing_vfs"] == 2
    assert json.loads(invoke(sim, "health", NIC1, "--json").stdout)["devices"][0]["action"] == "recreate-vfs"


def test_an_nvme_controller(run_cli: Run, tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "g", "qemu-guest")
    _ok(sim, "sriov", "enable", "nvme0", "--vfs", "3")
    _ok(sim, "sim", "fault", "pf-reset", "0000:00:02.0")
    assert _pf(sim, "nvme0")["missing_vfs"] == 3
    _ok(sim, "sriov", "enable", "nvme0", "--vfs", "3")
    assert _pf(sim, "nvme0")["missing_vfs"] == 0 and len(_pf(sim, "nvme0")["vfs"]) == 3


@pytest.mark.parametrize("exported", ["before", "after"])
def test_a_gpu_with_vgpu_vfs_is_repaired_by_apply_of_its_own_export(tmp_path: Path, exported: str) -> None:
    """h100-vgpu: 2 vGPUs on the GPU's VFs; the PF reset takes all 32 VFs. apply of the export taken
    before re-creates the VFs and the vGPUs; of the export taken after, the VFs."""
    sim = make_sim(tmp_path / "v", "h100-vgpu")
    _ok(sim, "vgpu", "create", "gpu0", "--type", "H100-4C", "--count", "2")
    _ok(sim, "health")
    path = tmp_path / "exported.yaml"
    if exported == "before":
        path.write_text(_ok(sim, "export"))
    _ok(sim, "sim", "fault", "pf-reset", "0000:41:00.0")
    if exported == "after":
        r = invoke(sim, "export")
        assert r.exit_code == 0
        assert "gpu0: 32 VFs missing (a PF reset took them away): the vGPUs they held cannot be read" in r.stderr
        path.write_text(r.stdout)
    assert invoke(sim, "assert", "-f", str(path)).exit_code == 1
    r = invoke(sim, "apply", "-f", str(path))
    assert r.exit_code == 0, r.output  # it said: unusable: VFs configured but missing
    assert _pf(sim, "gpu0")["missing_vfs"] == 0 and len(_pf(sim, "gpu0")["vfs"]) == 32
    vgpus = json.loads(_ok(sim, "vgpu", "list", "--json"))["vgpus"]
    assert len(vgpus) == (2 if exported == "before" else 0)
    assert invoke(sim, "assert", "-f", str(path)).exit_code == 0
    assert invoke(sim, "health", "gpu0").exit_code == 0


def test_a_repair_killed_at_any_write_is_recovered_and_converges(tmp_path: Path) -> None:
    """kill -9 at every kernel write of the repair, then ``recover``: the count is as it was (2), the VFs
    missing as before the command (killed before its first write) or there again (after it: the count
    written back creates them; "missing" is no state a write can make); a re-run converges to the
    uninterrupted result and a further run changes nothing."""
    from tests.engine.helpers import journal_left, vgpukit

    command = ("sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci")

    def broken(name: str) -> Path:
        sim = make_sim(tmp_path / name, "hgx-a100")
        _ok(sim, *command)
        _ok(sim, "sim", "fault", "pf-reset", NIC1)
        return sim

    clean = broken("clean")
    r = vgpukit(clean, "--debug", *command)
    assert r.returncode == 0, r.stderr
    writes = sum(1 for line in r.stderr.splitlines() if line.startswith("vgpukit.host: write '"))
    after = _pf(clean, "nic1")
    assert writes >= 3 and after["missing_vfs"] == 0
    for n in range(1, writes + 1):
        sim = broken(f"k{n}")
        p = vgpukit(sim, *command, env={"VGPUKIT_SIM_CRASH_AT_WRITE": str(n)})
        assert p.returncode == -9, f"write {n}/{writes} did not kill: {p.stderr}"
        assert vgpukit(sim, "recover").returncode == 0 and not journal_left(sim)
        pf = _pf(sim, "nic1")
        assert pf["num_vfs"] == 2 and (pf["missing_vfs"], len(pf["vfs"])) in ((2, 0), (0, 2)), (n, pf)
        assert vgpukit(sim, *command).returncode == 0
        assert [(v["bdf"], v["driver"]) for v in _pf(sim, "nic1")["vfs"]] == [
            (v["bdf"], v["driver"]) for v in after["vfs"]
        ]
        again = vgpukit(sim, "--json", *command)
        assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False


def test_vgpu_create_with_the_vfs_missing_names_the_repair(tmp_path: Path) -> None:
    """h100-vgpu after a PF reset: ``vgpu create`` points at the missing VFs and their repair, not at
    the host driver or ``sriov-manage -e`` (trial 2, item 11)."""
    sim = make_sim(tmp_path / "v", "h100-vgpu")
    _ok(sim, "sim", "fault", "pf-reset", "gpu0")
    r = invoke(sim, "vgpu", "create", "gpu0", "--type", "H100-20C")
    assert r.exit_code == 5, r.output
    assert "32 of its VFs are missing" in r.stderr
    assert "vgpukit sriov enable gpu0 --vfs 32" in r.stderr
    assert "sriov-manage" not in r.stderr


def test_an_export_taken_after_the_reset_keeps_the_driver_the_health_record_saw(nic: tuple[Path, Path]) -> None:
    """Export after the PF reset (trial 2, item 6): the VFs' driver comes from the health record, so
    apply re-creates them on vfio-pci; without a record the export says what it could not read."""
    sim, _ = nic
    r = invoke(sim, "export")
    assert r.exit_code == 0 and "driver: vfio-pci" in r.stdout, r.output
    path = sim.parent / "after.yaml"
    path.write_text(r.stdout)
    _ok(sim, "apply", "-f", str(path))
    assert {v["driver"] for v in _pf(sim, "nic1")["vfs"]} == {"vfio-pci"}
    assert invoke(sim, "assert", "-f", str(path)).exit_code == 0
    (sim / "run" / "vgpukit" / "health" / "state.json").unlink()
    _ok(sim, "sim", "fault", "pf-reset", NIC1)
    r = invoke(sim, "export")
    assert r.exit_code == 0 and "driver:" not in r.stdout.split("- device: nic1")[1].split("- device")[0]
    assert "nic1: 2 VFs missing (a PF reset took them away): their driver is not known" in r.stderr
    assert r.stdout.startswith("# sriov: nic1: 2 VFs missing")


def test_the_repair_names_the_vm_still_holding_a_gone_vfs_group(tmp_path: Path) -> None:
    """Trial 2: after the PF reset, the repair re-created the VFs without a word about the (simulated)
    VM that held the vanished VF's group: it lost the device, and the new VF is another one."""
    sim = make_sim(tmp_path / "h", "hgx-a100")
    _ok(sim, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci")
    _ok(sim, "sim", "hold", "0000:25:00.2", "--vm", "vm1")
    _ok(sim, "health")
    _ok(sim, "sim", "fault", "pf-reset", NIC1)
    r = invoke(sim, "health", "--json")
    repairs = {d["bdf"]: d.get("repair") or "" for d in json.loads(r.stdout)["devices"]}
    assert repairs["0000:25:00.2"].startswith("vgpukit sriov enable 0000:25:00.0 --vfs 2 --driver vfio-pci")
    assert "; vm1 (pid " in repairs["0000:25:00.2"] and "still holds its old VFIO group" in repairs["0000:25:00.2"]
    assert "vm1" not in repairs["0000:25:00.3"] and "vm1" not in repairs[NIC1]


def test_the_summary_says_the_missing_vfs_were_made_again(sim_dir: Path) -> None:
    """After a PF reset, the command that makes the VFs again says so in its summary; a command with
    nothing missing, or one that leaves no VFs, does not (trial 6: no "repaired" line)."""
    _ok(sim_dir, "sriov", "enable", "nic1", "--vfs", "4", "--driver", "vfio-pci")
    assert "re-created" not in _ok(sim_dir, "sriov", "enable", "nic1", "--vfs", "4", "--driver", "vfio-pci")
    _ok(sim_dir, "sim", "fault", "pf-reset", "nic1")
    out = _ok(sim_dir, "sriov", "enable", "nic1", "--vfs", "4", "--driver", "vfio-pci")
    assert out.rstrip().endswith("4 on vfio-pci; the 4 missing VFs re-created"), out
    _ok(sim_dir, "sim", "fault", "pf-reset", "nic1")
    out = _ok(sim_dir, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci")
    assert out.rstrip().endswith("2 on vfio-pci; 2 of the 4 missing VFs re-created"), out
    _ok(sim_dir, "sim", "fault", "pf-reset", "nic1")
    assert "re-created" not in _ok(sim_dir, "sriov", "disable", "nic1")
