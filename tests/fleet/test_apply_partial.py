"""One unusable GPU does not block a whole host config (issue 35 §0): ``apply`` applies every section
that does not touch it, leaves its sections alone with the health refusal and exits 6; ``diff`` and
``assert`` say the same; the boot unit counts 6 as started, so libvirtd and the kubelet start."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from tests.core.test_json_schemas import validator

REFUSAL = "gpu3 (0000:24:00.0) is unusable: the GPU stopped answering (NVML: GPU is lost)"


def _ok(sim: Path, *args: str) -> None:
    r = invoke(sim, *args)
    assert r.exit_code == 0, (args, r.stderr)


@pytest.fixture
def lost_after_export(tmp_path: Path) -> tuple[Path, Path]:
    """hgx-a100 with gpu3 in two 3g.20gb, exported; then XID 79 on gpu3, and the exported config asks
    for 4 VFs on nic0 (the bad GPU's own section already matches)."""
    sim = make_sim(tmp_path / "h", "hgx-a100")
    _ok(sim, "partition", "gpu3", "--mig", "3g.20gb,3g.20gb")
    text = invoke(sim, "export").stdout
    _ok(sim, "sim", "fault", "xid", "gpu3", "79")
    path = tmp_path / "host.yaml"
    path.write_text(text.replace("device: nic0\n      vfs: 0", "device: nic0\n      vfs: 4", 1))
    assert "vfs: 4" in path.read_text()
    return sim, path


def test_apply_applies_the_rest_and_leaves_the_lost_gpu_alone(lost_after_export: tuple[Path, Path]) -> None:
    sim, path = lost_after_export
    r = invoke(sim, "apply", "-f", str(path))
    assert r.exit_code == 6, r.output
    assert "done: create 4 VFs on 0000:05:00.0" in r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and REFUSAL in lines[0] and "see: vgpukit health 0000:24:00.0" in lines[0]
    nic0 = json.loads(invoke(sim, "sriov", "list", "nic0", "--json").stdout)["pfs"][0]
    assert len(nic0["vfs"]) == 4
    again = invoke(sim, "apply", "-f", str(path), "--json")  # twice: nothing more, the same answer
    assert again.exit_code == 6
    doc = json.loads(again.stdout)
    assert not sorted(validator("apply").iter_errors(doc), key=str)
    assert doc["plan"] == [] and doc["changed"] is False
    assert [(s["area"], s["device"], s["bdf"], s["error"]) for s in doc["skipped"]] == [
        ("mig", "gpu3", "0000:24:00.0", "unusable")
    ]
    assert REFUSAL in doc["skipped"][0]["message"] and doc["skipped"][0]["message"].startswith(f"{path}:")
    assert "nothing else to do" in invoke(sim, "apply", "-f", str(path)).stdout


def test_diff_and_assert_say_the_same(lost_after_export: tuple[Path, Path]) -> None:
    sim, path = lost_after_export
    diff = invoke(sim, "diff", "-f", str(path), "--json")
    assert diff.exit_code == 6, diff.stderr
    doc = json.loads(diff.stdout)
    assert not sorted(validator("diff").iter_errors(doc), key=str)
    assert doc["plan"] == ["create 4 VFs on 0000:05:00.0 (sriov_numvfs 0 -> 4) and wait for them"]
    assert [s["device"] for s in doc["skipped"]] == ["gpu3"]
    _ok_partial = invoke(sim, "apply", "-f", str(path))
    assert _ok_partial.exit_code == 6
    r = invoke(sim, "assert", "-f", str(path), "--json")
    assert r.exit_code == 1  # apply would leave gpu3 alone: the host cannot be said to match
    doc = json.loads(r.stdout)
    assert not sorted(validator("assert").iter_errors(doc), key=str)
    assert doc["matches"] is False and len(doc["differences"]) == 1
    assert doc["differences"][0].startswith("left alone: ") and REFUSAL in doc["differences"][0]


def test_a_config_of_healthy_devices_only_is_untouched_by_the_lost_gpu(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    _ok(sim, "sim", "fault", "lost", "gpu3")
    path = tmp_path / "host.yaml"
    path.write_text(
        "version: vgpukit.host/v1\nconfigs:\n  c:\n    sriov:\n      - {device: nic1, vfs: 2}\n    mig: two\n"
        "mig-configs:\n  two:\n    - {devices: [0, 1], mig-enabled: true, mig-devices: {1g.5gb: 1}}\n"
    )
    r = invoke(sim, "apply", "-f", str(path), "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["skipped"] == []


def test_the_boot_unit_counts_a_device_left_alone_as_started(tmp_path: Path) -> None:
    """``SuccessExitStatus=6``: systemd counts apply's 6 as success, so the units that require the boot
    unit (libvirtd, the kubelet) start; any other failure still keeps them down. systemd's own parser
    checks both units (``systemd-analyze verify``) where systemd is installed."""
    r = invoke(None, "boot-unit", "-f", "/etc/vgpukit/host.yaml", "-c", "a100-vms")
    unit = r.stdout
    service = unit.split("[Service]", 1)[1].split("[Install]", 1)[0]
    assert "SuccessExitStatus=6" in service.splitlines()
    assert "RequiredBy=libvirtd.service kubelet.service" in unit
    sim = make_sim(tmp_path / "mixed", "mixed-a100-t4")
    cfg = tmp_path / "mig.yaml"
    cfg.write_text("version: v1\nmig-configs:\n  off:\n    - {devices: all, mig-enabled: false}\n")
    _ok(sim, "mig", "service", "-f", str(cfg), "-c", "off", "--install")
    mig_unit = (sim / "etc/systemd/system/vgpukit-mig.service").read_text()
    assert "SuccessExitStatus=6" in mig_unit.split("[Service]", 1)[1].split("[Install]", 1)[0].splitlines()
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return
    for name, text in (("vgpukit-apply.service", unit), ("vgpukit-mig.service", mig_unit)):
        (tmp_path / name).write_text(text)
        done = subprocess.run([analyze, "verify", "--man=no", str(tmp_path / name)], capture_output=True, text=True)
        complaints = [line for line in done.stderr.splitlines() if name in line]  # "Failed to parse value"
        assert done.returncode == 0 and not complaints, done.stderr
