"""``vgpukit apply / diff / assert / export`` on simulated hosts of every profile (docs/fleet.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import as_json, invoke, make_sim
from tests.fuzz.harness import snapshot

HOST = """\
version: vgpukit.host/v1
configs:
  a100-vms:
    sriov:
      - device: nic0
        vfs: 4
        driver: vfio-pci
      - match: "15b3:101b"      # every other ConnectX-6 ...
        vfs: 2
    vfio:
      - device: nvme0
    mig: balanced
    qos:
      gpus:
        gpu2:
          policy: fixed-share
          tenants:
            a: {share: 70, cgroup: /sys/fs/cgroup/vm-a}
  guest:
    sriov:
      - device: nvme0
        vfs: 3
        driver: vfio-pci
    mdev:
      - parent: mtty
        type: mtty-2
        count: 2
        uuids: [c2177883-f1bb-47f0-914d-32a22e3a8804]
      - parent: mtty
        type: mtty-1
        count: 1
  t4:
    vgpu:
      - device: gpu0
        type: T4-4Q
        count: 2
      - device: gpu1
        type: GRID T4-2Q
        count: 3
  h100:
    sriov:
      - device: gpu0
        vfs: 8
    vgpu:
      - device: gpu0
        type: H100-4C
        count: 4
  h100-no-vfs:
    sriov:
      - device: gpu0
        vfs: 0
mig-configs:
  balanced:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 1
        "1g.5gb": 2
"""
HOST_A100 = HOST.replace('match: "15b3:101b"      # every other ConnectX-6 ...', "device: nic1")

CASES = [("hgx-a100", "a100-vms", 26), ("qemu-guest", "guest", 9), ("t4-mdev", "t4", 5)]


def sysfs(root: Path) -> dict[str, object]:
    """The simulated host's visible tree (the simulator's own bookkeeping left out, and the driver's
    MIG minor table, which it writes once at the first MIG use and never removes)."""
    skip = (".vgpukit-sim", "proc/driver/nvidia-caps/mig-minors")
    return {k: v for k, v in snapshot(root).items() if not k.startswith(skip)}


@pytest.fixture
def host_file(tmp_path: Path) -> Path:
    path = tmp_path / "host.yaml"
    path.write_text(HOST_A100)
    return path


@pytest.mark.parametrize(("profile", "name", "steps"), CASES)
def test_apply_then_nothing_to_do_then_export_is_a_no_op(
    tmp_path: Path, host_file: Path, profile: str, name: str, steps: int
) -> None:
    sim = make_sim(tmp_path / profile, profile)
    r = invoke(sim, "apply", "-f", str(host_file), "-c", name, "--json")
    assert r.exit_code == 0, r.stderr
    doc = as_json(r)
    assert doc["changed"] is True and len(doc["plan"]) == steps
    assert sum(doc["areas"].values()) == steps and all(s["area"] in doc["areas"] for s in doc["steps"])
    again = as_json(invoke(sim, "apply", "-f", str(host_file), "-c", name, "--json"))
    assert again["changed"] is False and again["plan"] == []
    assert invoke(sim, "assert", "-f", str(host_file), "-c", name).exit_code == 0
    exported = tmp_path / "export.yaml"
    exported.write_text(invoke(sim, "export").stdout)
    before = sysfs(sim)
    r = invoke(sim, "apply", "-f", str(exported), "--json")
    assert r.exit_code == 0 and as_json(r)["plan"] == [], r.stdout
    assert sysfs(sim) == before


def test_vfs_are_made_before_the_vgpus_put_on_them(tmp_path: Path, host_file: Path) -> None:
    sim = make_sim(tmp_path / "h100", "h100-vgpu")
    assert invoke(sim, "apply", "-f", str(host_file), "-c", "h100-no-vfs").exit_code == 0
    doc = as_json(invoke(sim, "apply", "-f", str(host_file), "-c", "h100", "--json"))
    assert [s["area"] for s in doc["steps"]] == ["sriov"] + ["vgpu"] * 4
    assert doc["steps"][1]["vf"] == "0000:41:00.4"
    assert as_json(invoke(sim, "apply", "-f", str(host_file), "-c", "h100", "--json"))["plan"] == []


def test_diff_and_dry_run_change_nothing_and_assert_exits_1(tmp_path: Path, host_file: Path) -> None:
    sim = make_sim(tmp_path / "h", "qemu-guest")
    before = sysfs(sim)
    diff = as_json(invoke(sim, "diff", "-f", str(host_file), "-c", "guest", "--json"))
    dry = as_json(invoke(sim, "apply", "-f", str(host_file), "-c", "guest", "--dry-run", "--json"))
    assert diff["dry_run"] and dry["dry_run"] and not dry["changed"]
    assert len(diff["plan"]) == len(dry["plan"]) == 9
    r = invoke(sim, "assert", "-f", str(host_file), "-c", "guest", "--json")
    assert r.exit_code == 1 and as_json(r)["matches"] is False and len(as_json(r)["differences"]) == 9
    assert sysfs(sim) == before


def test_a_failure_rolls_back_every_area_this_run_changed(tmp_path: Path, host_file: Path) -> None:
    sim = make_sim(tmp_path / "h")
    before = invoke(sim, "export").stdout
    tree = sysfs(sim)
    # the 2nd GPU instance fails: SR-IOV, vfio-pci and the first GPU's MIG layout were done by then
    assert invoke(sim, "sim", "fault", "add", "CreateGpuInstance", "--nth", "4").exit_code == 0
    r = invoke(sim, "apply", "-f", str(host_file), "-c", "a100-vms", "--json")
    assert r.exit_code == 1, r.stderr
    err = as_json(r)
    assert err["schema"] == "vgpukit.error/v1" and "rolled back the 1" in err["message"]
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("vgpukit: error: ")
    assert invoke(sim, "export").stdout == before
    assert sysfs(sim) == tree
    assert not (sim / "run" / "vgpukit" / "journal").exists()
    assert as_json(invoke(sim, "apply", "-f", str(host_file), "-c", "a100-vms", "--json"))["changed"] is True


def test_refuses_to_destroy_a_vf_in_use_and_changes_nothing(tmp_path: Path, host_file: Path) -> None:
    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "apply", "-f", str(host_file), "-c", "a100-vms").exit_code == 0
    assert invoke(sim, "sim", "hold", "0000:05:00.3", "--vm", "web1").exit_code == 0
    host_file.write_text(HOST_A100.replace("vfs: 4", "vfs: 2"))
    tree = sysfs(sim)
    r = invoke(sim, "apply", "-f", str(host_file), "-c", "a100-vms", "--json")
    assert r.exit_code == 4
    err = as_json(r)
    assert err["error"] == "in-use" and "0000:05:00.3" in err["message"] and "web1" in err["message"]
    assert sysfs(sim) == tree
    assert invoke(sim, "assert", "-f", str(host_file), "-c", "a100-vms").exit_code == 1


def test_refuses_to_remove_an_mdev_in_use(tmp_path: Path, host_file: Path) -> None:
    sim = make_sim(tmp_path / "h", "qemu-guest")
    assert invoke(sim, "apply", "-f", str(host_file), "-c", "guest").exit_code == 0
    uid = "c2177883-f1bb-47f0-914d-32a22e3a8804"
    assert invoke(sim, "sim", "hold", uid).exit_code == 0
    host_file.write_text(
        HOST_A100.replace("count: 2\n        uuids: [c2177883-f1bb-47f0-914d-32a22e3a8804]", "count: 0")
    )
    tree = sysfs(sim)
    r = invoke(sim, "apply", "-f", str(host_file), "-c", "guest", "--json")
    assert r.exit_code == 4 and as_json(r)["error"] == "in-use" and uid in as_json(r)["message"]
    assert sysfs(sim) == tree


def test_devices_not_mentioned_are_left_alone(tmp_path: Path, host_file: Path) -> None:
    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "sriov", "enable", "nic3", "--vfs", "5").exit_code == 0
    assert invoke(sim, "partition", "gpu5", "--mig", "7g.40gb").exit_code == 0
    assert invoke(sim, "apply", "-f", str(host_file), "-c", "a100-vms").exit_code == 0
    nic3 = as_json(invoke(sim, "sriov", "list", "nic3", "--json"))["pfs"][0]
    assert nic3["num_vfs"] == 5
    gpu5 = as_json(invoke(sim, "mig", "status", "gpu5", "--json"))["gpus"][0]
    assert [g["profile"] for g in gpu5["gpu_instances"]] == ["7g.40gb"]


H = "version: vgpukit.host/v1\nconfigs:\n  a:\n"
BAD = [  # (document, the line its error is on)
    (H + "    sriov:\n      - device: nic0\n        vfs: 4\n        drivr: x\n", 7),
    (H + "    sriov:\n      - vfs: 4\n", 5),
    (H + "    mdev:\n      - parent: mtty\n        type: t\n        count: -1\n", 7),
    (H + "    vgpus: []\n", 4),
    (H + "    mig: x\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: yes?\n", 8),
    ("version: vgpukit.host/v1\nsecret-token: hunter2\n", 2),
]


@pytest.mark.parametrize(("text", "line"), BAD)
def test_bad_documents_exit_2_naming_the_line_never_the_content(tmp_path: Path, text: str, line: int) -> None:
    sim = make_sim(tmp_path / "h", "qemu-guest")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    r = invoke(sim, "apply", "-f", str(path), "-c", "a")
    assert r.exit_code == 2, r.stderr
    assert re.match(rf"vgpukit: error: {re.escape(str(path))}:{line}(:[0-9]+)?: ", r.stderr), r.stderr
    assert r.stderr.count("\n") == 1
    assert "hunter2" not in r.stderr and "drivr" not in r.stderr


def test_config_selection_env_vars_and_mig_parted_files(tmp_path: Path, host_file: Path) -> None:
    sim = make_sim(tmp_path / "h")
    r = invoke(sim, "diff", "-f", str(host_file))
    assert r.exit_code == 2 and "choose one with -c" in r.stderr
    r = invoke(sim, "apply", "-f", str(host_file), "-c", "nope", "--json")
    assert r.exit_code == 3 and as_json(r)["error"] == "not-found"
    # a mig-parted file as is: its mig-configs names are configs
    mig = tmp_path / "mig-parted.yaml"
    mig.write_text("version: v1\nmig-configs:\n" + HOST.split("mig-configs:\n")[1])
    import os

    os.environ["VGPUKIT_HOST_FILE"], os.environ["VGPUKIT_HOST_CONFIG"] = str(mig), "balanced"
    try:
        doc = as_json(invoke(sim, "apply", "--json"))
    finally:
        del os.environ["VGPUKIT_HOST_FILE"], os.environ["VGPUKIT_HOST_CONFIG"]
    assert doc["config"] == "balanced" and doc["areas"]["mig"] == 16 and sum(doc["areas"].values()) == 16


def test_boot_unit_names_the_entry_point_and_orders_before_libvirt_and_kubelet(tmp_path: Path, host_file: Path) -> None:
    r = invoke(None, "boot-unit", "-f", str(host_file), "-c", "a100-vms")
    assert r.exit_code == 0
    unit = r.stdout
    exec_line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    exe = exec_line.removeprefix("ExecStart=").split(" apply ")[0]
    assert Path(exe.split()[0]).is_absolute() and Path(exe.split()[0]).exists()
    assert exec_line.endswith(f"apply -f {host_file} -c a100-vms")
    assert "Before=libvirtd.service virtqemud.service kubelet.service" in unit
    assert "Type=oneshot" in unit and "WantedBy=multi-user.target" in unit
    assert invoke(None, "boot-unit", "-f", "/etc/my host.yaml").exit_code == 2
    json.dumps(unit)


def test_cdi_specs_follow_the_mig_layout_in_the_same_run(tmp_path: Path, host_file: Path) -> None:
    """With CDI enabled, the specs are rewritten after the MIG steps, inside apply's journaled run."""
    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "cdi", "enable").exit_code == 0
    assert invoke(sim, "apply", "-f", str(host_file), "-c", "a100-vms").exit_code == 0
    spec = (sim / "etc" / "cdi" / "vgpukit-mig.yaml").read_text()
    assert spec.count("name: MIG-") == 6  # gpu0 and gpu1: 3g.20gb + 2 x 1g.5gb each
    assert as_json(invoke(sim, "apply", "-f", str(host_file), "-c", "a100-vms", "--json"))["plan"] == []


def test_diff_shows_the_mdev_uuids_apply_then_creates(tmp_path: Path) -> None:
    """The UUIDs of new mdevs are planned from the host as it is (parent, type, which one), not drawn
    at random: diff, a second diff and apply name the same ones."""
    sim = make_sim(tmp_path / "g", "qemu-guest")
    path = tmp_path / "host.yaml"
    path.write_text(HOST)
    first = as_json(invoke(sim, "diff", "-f", str(path), "-c", "guest", "--json"))["plan"]
    again = as_json(invoke(sim, "diff", "-f", str(path), "-c", "guest", "--json"))["plan"]
    made = as_json(invoke(sim, "apply", "-f", str(path), "-c", "guest", "--json"))["plan"]
    creates = [line for line in first if line.startswith("create mtty")]
    assert len(creates) == 3 and first == again == made
