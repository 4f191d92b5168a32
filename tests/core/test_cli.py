"""CLI conventions: JSON documents, exit codes, one-line errors, naming, plain output when piped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import Run, as_json

GOLDEN = Path(__file__).parent / "golden"


def test_topo_json(sim_dir: Path, run_cli: Run) -> None:
    r = run_cli(sim_dir, "topo", "--json")
    assert r.exit_code == 0, r.stderr
    doc = as_json(r)
    assert doc["schema"] == "vgpukit.topo/v1"
    assert [root["host_bridge"] for root in doc["roots"]] == ["pci0000:00", "pci0000:20", "pci0000:80", "pci0000:a0"]
    rp = doc["roots"][0]["children"][0]
    gpu0 = rp["children"][0]["children"][0]["children"][0]
    assert gpu0["alias"] == "gpu0" and gpu0["kind"] == "gpu" and gpu0["ids"] == "10de:20b0"
    assert gpu0["gpu"]["mig_capable"] is True and gpu0["gpu"]["uuid"].startswith("GPU-")
    assert gpu0["numa_node"] == 0 and gpu0["iommu_group"] == 3
    assert doc["numa_nodes"] == {"0": "0-31,64-95", "1": "32-63,96-127"}


def test_topo_text_golden(sim_dir: Path, run_cli: Run) -> None:
    r = run_cli(sim_dir, "topo")
    assert r.exit_code == 0
    assert r.stdout == (GOLDEN / "topo-hgx-a100.txt").read_text()


def test_matrix_json(sim_dir: Path, run_cli: Run) -> None:
    """The text is golden-tested in test_topo_smi.py; here the document's facts."""
    doc = as_json(run_cli(sim_dir, "--json", "topo", "--matrix"))
    assert doc["pcie"]["GPU0"]["GPU1"] == "PIX" and doc["pcie"]["GPU3"]["GPU4"] == "SYS"
    assert doc["matrix"]["GPU0"]["GPU1"] == "NV12" and doc["matrix"]["GPU0"]["NIC1"] == "NODE"
    assert doc["affinity"]["GPU5"] == {"bdf": "0000:84:00.0", "cpus": "32-63,96-127", "numa_node": 1}


def test_devices_filters(sim_dir: Path, run_cli: Run) -> None:
    doc = as_json(run_cli(sim_dir, "devices", "--kind", "nic", "--json"))
    assert [d["alias"] for d in doc["devices"]] == ["nic0", "nic1", "nic2", "nic3"]
    doc = as_json(run_cli(sim_dir, "devices", "--vendor", "0x10DE", "--json"))
    assert len(doc["devices"]) == 8
    doc = as_json(run_cli(sim_dir, "devices", "--json"))
    assert all(d["kind"] != "bridge" for d in doc["devices"])


def test_bad_input_exit_codes(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    r = run_cli(sim_dir, "devices", "--vendor", "zz")
    assert r.exit_code == 2 and r.stderr.startswith("vgpukit: error: invalid vendor id") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run_cli(tmp_path / "nothing", "topo")
    assert r.exit_code == 3 and "is not a simulated host" in r.stderr
    r = run_cli(sim_dir, "--json", "devices", "--vendor", "zz")
    assert json.loads(r.stdout)["error"] == "invalid-input"
    r = run_cli(sim_dir, "topo", "--bogus")
    assert r.exit_code == 2


def test_sim_init_refuses_non_empty(tmp_path: Path, run_cli: Run) -> None:
    d = tmp_path / "x"
    d.mkdir()
    (d / "precious").write_text("keep")
    r = run_cli(None, "sim", "init", str(d))
    assert r.exit_code == 4 and (d / "precious").exists()
    r = run_cli(None, "sim", "init", str(d), "--force")
    assert r.exit_code == 4 and "not a simulated host" in r.stderr


def test_sim_state_persists_between_processes(sim_dir: Path) -> None:
    env = {**os.environ, "VGPUKIT_SIM": str(sim_dir)}
    py = [sys.executable, "-m", "vgpukit"]
    subprocess.run([*py, "sim", "hold", "gpu3"], env=env, check=True, capture_output=True)
    out = subprocess.run([*py, "sim", "info", "--json"], env=env, check=True, capture_output=True, text=True)
    assert json.loads(out.stdout)["holders"][0]["holds"] == "/dev/vfio/15"


def test_help_lists_commands(run_cli: Run) -> None:
    r = run_cli(None, "--help")
    assert r.exit_code == 0 and "topo" in r.stdout and "sim" in r.stdout
