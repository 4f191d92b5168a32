"""GPU specs against nvidia-ctk's own expected output, the ld cache reader, and the engine's refresh."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import Run
from vgpukit.cdi import ldcache
from vgpukit.cdi import spec as cdi
from vgpukit.cdi_settings import Settings
from vgpukit.host import Host
from vgpukit.nvml import NvmlGpu

from ..conftest import as_json
from .test_cdi import validate_cdi

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-ctk"


class OneGpu:
    def gpus(self) -> list[NvmlGpu]:
        return [NvmlGpu(0, "0000:00:1e.0", "GPU-00000000-0000-0000-0000-000000000000", "T4", False, False, False)]


def test_ld_cache_of_a_real_system_is_read() -> None:
    entries = ldcache.parse((DATA / "rootfs-1/etc/ld.so.cache").read_bytes())
    assert entries is not None and len(entries) > 600
    assert ldcache.CacheEntry("libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so.1") in entries
    assert ldcache.parse(b"not a cache") is None
    mine = [ldcache.CacheEntry("libx.so.1", "/usr/lib/libx.so.1")]
    assert ldcache.parse(ldcache.write(mine)) == mine
    assert ldcache.parse(ldcache.write(mine, arch_flags=0x0003)) == []  # 32-bit libraries left out


def test_gpu_spec_matches_nvidia_ctk(tmp_path: Path) -> None:
    """Same root, same device: spec-wide edits and device '0' / 'all' equal nvidia-ctk's expected spec;
    the only difference is the kind and the extra UUID name (docs/cdi.md)."""
    root = tmp_path / "rootfs-1"
    shutil.copytree(DATA / "rootfs-1", root, symlinks=True)
    golden = yaml.safe_load((DATA / "default.yaml").read_text().replace("{{ .driverRoot }}", str(root)))
    specs, _ = cdi.collect(Host(root), OneGpu(), ("gpu",), Settings())  # type: ignore[arg-type]
    mine = specs[0].to_dict()
    validate_cdi(mine)
    assert mine["cdiVersion"] == golden["cdiVersion"]
    assert mine["containerEdits"] == golden["containerEdits"]
    by_name = {d["name"]: d for d in mine["devices"]}
    for dev in golden["devices"]:
        assert by_name[dev["name"]] == dev, dev["name"]
    assert set(by_name) - {d["name"] for d in golden["devices"]} == {"GPU-00000000-0000-0000-0000-000000000000"}
    assert (mine["kind"], golden["kind"]) == ("vgpukit.io/gpu", "example.com/device")


def test_no_ld_cache_uses_the_fallback_listing(tmp_path: Path) -> None:
    root = tmp_path / "r"
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.550.1").write_text("")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.550.1")
    (lib / "libnvidia-ml.so.550.1").write_text("")
    from vgpukit.cdi import nvidia

    drv = nvidia.find_driver(Host(root))
    assert drv is not None and drv.version == "550.1"
    lib = "/usr/lib/x86_64-linux-gnu"
    assert drv.libraries == (f"{lib}/libcuda.so.550.1", f"{lib}/libnvidia-ml.so.550.1")


def _vfs_in_spec(sim: Path) -> list[str]:
    path = sim / "etc/cdi/vgpukit-vf.yaml"
    if not path.exists():
        return []
    return [d["name"] for d in yaml.safe_load(path.read_text())["devices"] if d["name"] != "all"]


def test_mutating_commands_refresh_enabled_specs(sim_dir: Path, run_cli: Run) -> None:
    assert run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "1", "--driver", "vfio-pci").exit_code == 0
    assert _vfs_in_spec(sim_dir) == []  # not enabled: nothing written
    res = run_cli(sim_dir, "cdi", "enable", "--class", "vf", "--class", "mig", "--json")
    assert res.exit_code == 0, res.stderr
    assert as_json(res)["plan"][0].startswith("keep CDI specs in /etc/cdi current")
    assert _vfs_in_spec(sim_dir) == ["0000:05:00.2"]
    assert run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "3", "--driver", "vfio-pci").exit_code == 0
    assert _vfs_in_spec(sim_dir) == ["0000:05:00.2", "0000:05:00.3", "0000:05:00.4"]
    assert run_cli(sim_dir, "partition", "gpu0", "--mig", "3g.20gb").exit_code == 0
    mig = yaml.safe_load((sim_dir / "etc/cdi/vgpukit-mig.yaml").read_text())
    validate_cdi(mig)
    assert mig["devices"][0]["name"] == "0:0"
    listing = as_json(run_cli(sim_dir, "cdi", "list", "--json"))
    assert listing["stale"] == [] and "vgpukit.io/vf=0000:05:00.4" in [d["name"] for d in listing["devices"]]
    assert run_cli(sim_dir, "sriov", "disable", "nic0").exit_code == 0
    assert not (sim_dir / "etc/cdi/vgpukit-vf.yaml").exists()  # no VFs left: our spec removed
    assert run_cli(sim_dir, "cdi", "disable").exit_code == 0
    assert not (sim_dir / "etc/cdi/vgpukit-mig.yaml").exists() and not (sim_dir / "etc/vgpukit/cdi.json").exists()


def test_recovery_refreshes_specs(sim_dir: Path, run_cli: Run) -> None:
    """A command killed half-way: recovery puts the host back and the spec follows it."""
    import os
    import subprocess
    import sys

    assert run_cli(sim_dir, "cdi", "enable", "--class", "vf").exit_code == 0
    assert run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "1", "--driver", "vfio-pci").exit_code == 0
    env = {**os.environ, "VGPUKIT_SIM_CRASH_AT_WRITE": "6"}
    cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim_dir), "sriov", "enable", "nic0", "--vfs", "3",
           "--driver", "vfio-pci"]  # fmt: skip
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    res = run_cli(sim_dir, "recover", "--json")
    assert res.exit_code == 0, res.stderr
    assert _vfs_in_spec(sim_dir) == ["0000:05:00.2"]
    assert as_json(run_cli(sim_dir, "cdi", "list", "--json"))["stale"] == []


def test_broken_settings_never_block_a_change(sim_dir: Path, run_cli: Run, caplog: pytest.LogCaptureFixture) -> None:
    (sim_dir / "etc/vgpukit").mkdir(parents=True, exist_ok=True)
    (sim_dir / "etc/vgpukit/cdi.json").write_text('{"schema": "other"}')
    res = run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "1")
    assert res.exit_code == 0 and "CDI specs not refreshed" in caplog.text


def test_gpu_share_spec_from_qos_tenants(sim_dir: Path, run_cli: Run) -> None:
    (sim_dir / "etc/vgpukit/qos.yaml").write_text(
        "gpus:\n  gpu1:\n    tenants:\n      a: {class: online, share: 50, pids: [10]}\n"
        "  gpu9:\n    tenants:\n      b: {class: online, share: 50, pids: [11]}\n"
    )
    lib = sim_dir / "usr/lib/vgpukit/libvgpukit-cuda.so"
    res = run_cli(sim_dir, "cdi", "generate", "--class", "gpu-share")
    assert res.exit_code == 0 and "libvgpukit-cuda.so is missing" in res.stderr
    lib.parent.mkdir(parents=True)
    lib.write_text("x")
    res = run_cli(sim_dir, "cdi", "generate", "--class", "gpu-share")
    assert res.exit_code == 0 and "tenant b: GPU key gpu9" in res.stderr
    spec = yaml.safe_load((sim_dir / "etc/cdi/vgpukit-gpu-share.yaml").read_text())
    validate_cdi(spec)
    (dev,) = spec["devices"]
    edits = dev["containerEdits"]
    assert dev["name"] == "a" and "LD_PRELOAD=/usr/lib/vgpukit/libvgpukit-cuda.so" in edits["env"]
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/nvidia1"]
    assert edits["mounts"][0]["containerPath"] == "/usr/lib/vgpukit/libvgpukit-cuda.so"
    assert any("update-ldcache" in h["args"] for h in spec["containerEdits"]["hooks"])


def test_enable_dry_run_and_bad_input(sim_dir: Path, run_cli: Run) -> None:
    res = run_cli(sim_dir, "--dry-run", "cdi", "enable", "--dir", "/var/run/cdi", "--json")
    assert res.exit_code == 0, res.stderr
    plan = as_json(res)["plan"]
    assert plan[0].startswith("keep CDI specs in /var/run/cdi current") and any("vgpukit-gpu.yaml" in p for p in plan)
    assert not (sim_dir / "etc/vgpukit/cdi.json").exists() and not (sim_dir / "var/run/cdi").exists()
    for bad in (["--dir", "cdi"], ["--dir", "/etc/../x"], ["--hook", "bin/hook"], ["--class", "nope"]):
        res = run_cli(sim_dir, "cdi", "enable", *bad)
        assert res.exit_code == 2 and res.stderr.count("\n") == 1, (bad, res.stderr)
    assert not (sim_dir / "etc/vgpukit/cdi.json").exists()
    # moving the directory takes vgpukit's files out of the old one
    assert run_cli(sim_dir, "cdi", "enable", "--class", "gpu").exit_code == 0
    assert (sim_dir / "etc/cdi/vgpukit-gpu.yaml").exists()
    assert run_cli(sim_dir, "cdi", "enable", "--class", "gpu", "--dir", "/var/run/cdi").exit_code == 0
    assert not (sim_dir / "etc/cdi/vgpukit-gpu.yaml").exists() and (sim_dir / "var/run/cdi/vgpukit-gpu.yaml").exists()
    again = as_json(run_cli(sim_dir, "cdi", "enable", "--class", "gpu", "--dir", "/var/run/cdi", "--json"))
    assert again["plan"] == [] and again["changed"] is False


def test_narrowing_the_classes_removes_the_dropped_specs(sim_dir: Path, run_cli: Run) -> None:
    """``cdi enable --class ...`` with fewer classes: the dropped classes' specs go in the same journaled
    run (they would list devices nobody keeps current any more); a spec vgpukit did not write stays."""
    assert run_cli(sim_dir, "cdi", "enable", "--class", "gpu", "--class", "mig").exit_code == 0
    assert run_cli(sim_dir, "partition", "gpu0", "--mig", "3g.20gb").exit_code == 0
    mig = sim_dir / "etc/cdi/vgpukit-mig.yaml"
    assert mig.exists()
    dry = as_json(run_cli(sim_dir, "--dry-run", "cdi", "enable", "--class", "gpu", "--json"))
    assert any(p.startswith("remove /etc/cdi/vgpukit-mig.yaml") for p in dry["plan"]) and mig.exists()
    res = run_cli(sim_dir, "cdi", "enable", "--class", "gpu", "--json")
    assert res.exit_code == 0, res.stderr
    assert not mig.exists() and (sim_dir / "etc/cdi/vgpukit-gpu.yaml").exists()
    assert run_cli(sim_dir, "mig", "destroy", "0", "--all").exit_code == 0
    listing = as_json(run_cli(sim_dir, "cdi", "list", "--json"))
    assert listing["stale"] == [] and not any(d["name"].startswith("vgpukit.io/mig=") for d in listing["devices"])
    again = as_json(run_cli(sim_dir, "cdi", "enable", "--class", "gpu", "--json"))
    assert again["plan"] == [] and again["changed"] is False


def test_generate_output_reports_the_path_it_writes(sim_dir: Path, run_cli: Run) -> None:
    """Under --sim an --output path is inside the simulated host: the report names that file."""
    res = run_cli(sim_dir, "cdi", "generate", "--output", "/srv/specs/out.yaml")
    assert res.exit_code == 0, res.stderr
    written = sim_dir / "srv/specs/out-gpu.yaml"
    assert written.is_file() and f"done: write {written} (" in res.stdout
    res = run_cli(sim_dir, "cdi", "generate", "--output", "/srv/specs/out.yaml", "--class", "vf", "--json")
    files = as_json(res)["files"]
    assert [f["path"] for f in files] == [str(sim_dir / "srv/specs/out-vf.yaml")]
