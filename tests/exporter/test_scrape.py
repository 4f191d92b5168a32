"""``vgpukit exporter --once`` on every built-in simulated profile: the scrape parses, carries
dcgm-exporter's names and labels, and an injected fault (XID, ECC, a lost GPU) reaches it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from vgpukit.sim.build import builtin_profiles

from .helpers import scrape, value

DCGM = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
)
DCGM_LABELS = {"gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id"}
PROFILES = sorted(builtin_profiles())


@pytest.fixture(params=PROFILES)
def host(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    return str(request.param), make_sim(tmp_path / "h", str(request.param))


def _has_gpu(fam: dict[str, list[tuple[dict[str, str], float]]]) -> bool:
    return bool(fam.get("DCGM_FI_DEV_GPU_UTIL"))


def test_the_scrape_parses_with_dcgm_names_and_labels(host: tuple[str, Path]) -> None:
    profile, sim = host
    fam = scrape(sim)
    assert fam["vgpukit_exporter_source_errors"] and all(v == 0 for _, v in fam["vgpukit_exporter_source_errors"])
    if not _has_gpu(fam):
        assert profile == "qemu-guest"  # no NVIDIA GPU on that host: no GPU series, the rest still there
        return
    for name in DCGM:
        assert fam[name], name
        for labels, _ in fam[name]:
            assert set(labels) == DCGM_LABELS
            assert labels["device"] == f"nvidia{labels['gpu']}"
            assert labels["pci_bus_id"].startswith("0000") and len(labels["pci_bus_id"].split(":")[0]) == 8
    assert value(fam, "DCGM_FI_DEV_FB_FREE", gpu="0") > 1000  # MiB
    assert 1 < value(fam, "DCGM_FI_DEV_POWER_USAGE", gpu="0") < 1000  # W
    assert value(fam, "vgpukit_device_health", device="gpu0") == 0


@pytest.mark.parametrize("fault", ["xid", "ecc", "lost"])
def test_an_injected_fault_reaches_the_exporter(host: tuple[str, Path], fault: str) -> None:
    profile, sim = host
    before = scrape(sim)
    if not _has_gpu(before):
        assert profile == "qemu-guest"  # no NVIDIA GPU to inject into
        return
    args = {"xid": ["xid", "gpu0", "79"], "ecc": ["ecc", "gpu0", "--double"], "lost": ["lost", "gpu0"]}[fault]
    r = invoke(sim, "sim", "fault", *args)
    assert r.exit_code == 0, r.stderr
    after = scrape(sim)
    assert after != before
    assert value(after, "vgpukit_device_health", device="gpu0") == 2  # unusable
    if fault == "ecc":
        assert value(after, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu="0") == 1
        assert value(after, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", gpu="0") == 1
    else:  # XID 79: the GPU fell off the bus, as a lost GPU: it reports nothing more
        assert value(after, "DCGM_FI_DEV_GPU_UTIL", gpu="0") is None
        assert value(after, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == (79 if fault == "xid" else 0)
        assert value(after, "DCGM_FI_DEV_GPU_UTIL", gpu="1") is not None or profile == "h100-vgpu"


def test_the_last_xid_is_dcgm_xid_errors(sim_dir: Path) -> None:
    assert value(scrape(sim_dir), "DCGM_FI_DEV_XID_ERRORS", gpu="2") == 0
    assert invoke(sim_dir, "sim", "fault", "xid", "gpu2", "31").exit_code == 0
    assert value(scrape(sim_dir), "DCGM_FI_DEV_XID_ERRORS", gpu="2") == 31


def test_recovery_clears_the_volatile_count_not_the_aggregate(sim_dir: Path) -> None:
    assert invoke(sim_dir, "sim", "fault", "ecc", "gpu1").exit_code == 0
    assert invoke(sim_dir, "sim", "fault", "recover", "gpu1").exit_code == 0
    fam = scrape(sim_dir)
    assert value(fam, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu="1") == 0
    assert value(fam, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", gpu="1") == 1


def test_mig_instances_carry_dcgm_mig_labels(sim_dir: Path) -> None:
    assert invoke(sim_dir, "partition", "gpu2", "--mig", "3g.20gb,2g.10gb").exit_code == 0
    fam = scrape(sim_dir)
    got = sorted((lab["GPU_I_PROFILE"], lab["gpu"]) for lab, _ in fam["vgpukit_mig_instance_info"])
    assert got == [("2g.10gb", "2"), ("3g.20gb", "2")]
    mem = {lab["GPU_I_PROFILE"]: v for lab, v in fam["vgpukit_mig_instance_memory_bytes"]}
    assert mem["3g.20gb"] > mem["2g.10gb"] > 0


def test_a_vf_held_by_a_vm_names_it(sim_dir: Path) -> None:
    for args in (("sriov", "enable", "nic0", "--vfs", "2"), ("bind", "0000:05:00.2", "--driver", "vfio-pci")):
        assert invoke(sim_dir, *args).exit_code == 0
    assert value(scrape(sim_dir), "vgpukit_slice_held", id="0000:05:00.2") == 0
    assert invoke(sim_dir, "sim", "hold", "0000:05:00.2", "--vm", "web1").exit_code == 0
    assert value(scrape(sim_dir), "vgpukit_slice_held", id="0000:05:00.2", vm="web1", kind="vf") == 1


def test_the_exporter_only_reads(sim_dir: Path) -> None:
    """A scrape saves no health record (``vgpukit health`` does): the host is as it was."""
    assert invoke(sim_dir, "sim", "fault", "xid", "gpu0", "48").exit_code == 0
    before = sorted(p.relative_to(sim_dir) for p in sim_dir.rglob("*") if p.is_file())
    scrape(sim_dir)
    after = sorted(p.relative_to(sim_dir) for p in sim_dir.rglob("*") if p.is_file())
    assert after == before
