"""The commands, end to end on simulated hosts (hgx-a100: 8x A100-SXM4-40GB, MIG off)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import as_json, invoke
from vgpukit.sim import nvml as simdrv
from vgpukit.sim.build import init_sim
from vgpukit.sim.nvml import SimNvml


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = tmp_path / "hgx"
    init_sim(root, "hgx-a100")
    return root


def layout(sim: Path, gpu: int = 0) -> list[tuple[int, int, tuple[int, ...]]]:
    n = SimNvml(sim)
    if not n.mig_mode(gpu)[0]:
        return []
    return sorted((g.profile_id, g.start, tuple(c.slices for c in g.compute_instances)) for g in n.gpu_instances(gpu))


def test_partition_on_ampere_with_no_reset_changes_nothing(host: Path) -> None:
    r = invoke(host, "partition", "gpu0", "--mig", "3g.20gb", "--no-reset")
    assert (
        r.exit_code == 4
        and "needs a GPU reset" in r.stderr
        and "reset the GPU as part of it: vgpukit partition gpu0 --mig 3g.20gb)" in r.stderr
    )
    assert SimNvml(host).mig_mode(0) == (False, False)


def test_partition_resets_an_idle_ampere_gpu_by_default(host: Path) -> None:
    """The issue's own example: enables MIG (reset included, the GPU being idle) and creates the slice."""
    r = invoke(host, "partition", "gpu0", "--mig", "3g.20gb", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and any("reset" in step for step in doc["plan"])
    assert SimNvml(host).mig_mode(0) == (True, True) and len(layout(host)) == 1
    pid = simdrv.add_client(host, 1, "nvidia-persistenced")
    r = invoke(host, "partition", "gpu1", "--mig", "3g.20gb")
    assert r.exit_code == 4 and "nvidia-persistenced" in r.stderr and SimNvml(host).mig_mode(1) == (False, False)
    simdrv.remove_client(host, pid)


def test_partition_enables_places_and_is_idempotent(host: Path) -> None:
    r = invoke(host, "partition", "gpu0", "--mig", "3g.20gb", "--reset", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and doc["schema"] == "vgpukit.mig-partition/v1" and doc["changed"]
    assert doc["placements"] == [{"gpu": 0, "profile": "3g.20gb", "start": 4, "size": 4}]
    gi = doc["gpus"][0]["gpu_instances"][0]
    assert gi["compute_instances"][0]["uuid"].startswith("MIG-")
    r = invoke(host, "partition", "gpu0", "--mig", "3g.20gb", "--reset", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and doc["plan"] == [] and not doc["changed"]
    r = invoke(host, "mig", "status", "gpu0")
    assert r.exit_code == 0 and "MIG: on" in r.stdout and ". . . . A A A A" in r.stdout and "4g.20gb" in r.stdout


def test_incremental_keeps_busy_instances_and_adds(host: Path) -> None:
    invoke(host, "partition", "gpu0", "--mig", "1g.5gb", "--reset")
    gi = SimNvml(host).gpu_instances(0)[0]
    simdrv.add_client(host, 0, "trainer", gi=gi.id)
    r = invoke(host, "partition", "gpu0", "--mig", "1g.5gb,3g.20gb,2g.10gb")
    assert r.exit_code == 0
    assert [g.id for g in SimNvml(host).gpu_instances(0) if g.id == gi.id] == [gi.id]
    assert sorted(p for p, _, _ in layout(host)) == [9, 14, 19]
    r = invoke(host, "partition", "gpu0", "--mig", "4g.20gb", "--replace")
    assert r.exit_code == 4 and "trainer" in r.stderr  # never destroys a busy instance
    assert len(layout(host)) == 3


def test_dry_run_reports_fit_and_changes_nothing(host: Path) -> None:
    r = invoke(host, "partition", "gpu1", "--mig", "1g.5gb=2,2g.10gb,3g.20gb", "--reset", "--dry-run", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and doc["dry_run"] and not doc["changed"]
    assert sorted((p["profile"], p["start"]) for p in doc["placements"]) == [
        ("1g.5gb", 2),
        ("1g.5gb", 3),
        ("2g.10gb", 0),
        ("3g.20gb", 4),
    ]
    assert SimNvml(host).mig_mode(1) == (False, False)
    r = invoke(host, "partition", "gpu1", "--mig", "3g.20gb=2,1g.5gb", "--reset", "--dry-run")
    assert r.exit_code == 2 and "can never fit" in r.stderr and "memory slots" in r.stderr


def test_bad_input(host: Path) -> None:
    r = invoke(host, "partition", "gpu0", "--mig", "5g.25gb", "--reset")
    assert r.exit_code == 2 and "valid: 1g.5gb" in r.stderr and "7g.40gb" in r.stderr
    r = invoke(host, "partition", "gpu0", "--mig", "3g.20gb=3", "--reset")
    assert r.exit_code == 2 and "at most 2" in r.stderr
    r = invoke(host, "partition", "gpu0", "--mig", "3g.20gb", "--ci", "2c.3g.20gb=2", "--reset")
    assert r.exit_code == 2 and "does not fit" in r.stderr
    r = invoke(host, "partition", "gpu9", "--mig", "3g.20gb")
    assert r.exit_code == 3
    assert SimNvml(host).mig_mode(0) == (False, False)


def test_not_mig_capable(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory([None])
    r = invoke(sim, "partition", "0", "--mig", "1g.5gb")
    assert r.exit_code == 5 and "not MIG-capable" in r.stderr


def test_failure_half_way_rolls_back_everything(host: Path) -> None:
    simdrv.add_fault(host, "CreateGpuInstance", "UNKNOWN", nth=3)
    r = invoke(host, "partition", "gpu2", "--mig", "1g.5gb=4", "--reset")
    assert r.exit_code == 1 and "rolled back" in r.stderr
    assert SimNvml(host).mig_mode(2) == (False, False)
    assert not list((host / "dev" / "nvidia-caps").glob("nvidia-cap*"))


def test_failure_half_way_keeps_what_existed(host: Path) -> None:
    invoke(host, "partition", "gpu0", "--mig", "3g.20gb", "--reset")
    before = layout(host)
    simdrv.add_fault(host, "CreateComputeInstance", "UNKNOWN", nth=2)
    r = invoke(host, "partition", "gpu0", "--mig", "3g.20gb,2g.10gb,1g.5gb")
    assert r.exit_code == 1 and layout(host) == before


def test_hopper_needs_no_reset(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory(["H100-SXM5-80GB"])
    r = invoke(sim, "partition", "0", "--mig", "3g.40gb,2g.20gb", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and [s for s in doc["plan"] if "reset" in s] == []
    assert sorted(p for p, _, _ in layout(sim)) == [9, 14]


def test_hopper_held_by_a_client_rolls_the_mode_back(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory(["H100-SXM5-80GB"])
    simdrv.add_client(sim, 0, "python3")
    r = invoke(sim, "partition", "0", "--mig", "1g.10gb")
    assert r.exit_code == 4 and "pending" in r.stderr and "nothing was changed" in r.stderr  # put back at once
    assert SimNvml(sim).mig_mode(0) == (False, False)


def test_gpu_named_by_uuid_or_address(host: Path) -> None:
    gpu = SimNvml(host).gpus()[5]
    r = invoke(host, "partition", gpu.uuid, "--mig", "2g.10gb", "--reset", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and doc["gpus"][0]["bdf"] == gpu.bdf and doc["gpus"][0]["gpu"] == "gpu5"
    r = invoke(host, "mig", "status", gpu.bdf.split(":", 1)[1], "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and doc["gpus"][0]["compute_slices"] == {"total": 7, "free": 5}


def test_pending_mode_is_reported_and_needs_reset(host: Path) -> None:
    SimNvml(host).set_mig_mode(3, True)
    r = invoke(host, "mig", "status", "gpu3", "--json")
    doc = as_json(r)
    assert doc["gpus"][0]["mig"] == {"current": False, "pending": True, "change_pending": True}
    r = invoke(host, "partition", "gpu3", "--mig", "1g.5gb", "--no-reset")
    assert r.exit_code == 4 and "reset" in r.stderr
    pid = simdrv.add_client(host, 3, "nvidia-persistenced")
    r = invoke(host, "partition", "gpu3", "--mig", "1g.5gb", "--reset")
    assert r.exit_code == 4 and "nvidia-persistenced" in r.stderr
    simdrv.remove_client(host, pid)
    assert invoke(host, "partition", "gpu3", "--mig", "1g.5gb", "--reset").exit_code == 0


def test_destroy_and_disable(host: Path) -> None:
    invoke(host, "partition", "gpu0", "--mig", "1g.5gb=2", "--reset")
    busy = SimNvml(host).gpu_instances(0)[0]
    pid = simdrv.add_client(host, 0, "trainer", gi=busy.id)
    r = invoke(host, "mig", "destroy", "gpu0", "--all")
    assert r.exit_code == 4 and "trainer" in r.stderr and len(layout(host)) == 2
    r = invoke(host, "mig", "destroy", "gpu0", "--all", "--force")
    assert r.exit_code == 4 and "skipped" in r.stderr and len(layout(host)) == 1
    r = invoke(host, "mig", "disable", "gpu0")
    assert r.exit_code == 4 and "mig destroy" in r.stderr
    simdrv.remove_client(host, pid)
    assert invoke(host, "mig", "destroy", "gpu0", "--gi", str(busy.id)).exit_code == 0
    r = invoke(host, "mig", "disable", "gpu0", "--no-reset")
    assert r.exit_code == 0 and "reset" in r.stdout and SimNvml(host).mig_mode(0) == (True, False)
    assert invoke(host, "mig", "disable", "gpu0", "--reset").exit_code == 0
    assert SimNvml(host).mig_mode(0) == (False, False)


def test_profiles(host: Path) -> None:
    r = invoke(host, "mig", "profiles", "gpu0", "--json")
    doc = as_json(r)
    assert r.exit_code == 0
    p = next(r for r in doc["profiles"] if r["name"] == "3g.20gb")
    assert (p["id"], p["slices"], p["max_count"]) == (9, 3, 2)
    assert p["placements"] == [{"start": 0, "size": 4}, {"start": 4, "size": 4}]
    assert "1c.3g.20gb" in p["compute_instances"]


def test_subdivided_instance_counts_unless_ci_layout_is_asked(host: Path) -> None:
    invoke(host, "partition", "gpu6", "--mig", "3g.20gb", "--ci", "1c.3g.20gb=3", "--reset")
    r = invoke(host, "partition", "gpu6", "--mig", "3g.20gb", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and doc["plan"] == []  # any 3g.20gb satisfies a request that names no --ci
    r = invoke(host, "partition", "gpu6", "--mig", "3g.20gb", "--ci", "2c.3g.20gb,1c.3g.20gb", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and len(layout(host, 6)) == 2  # a different layout was asked: a second GI
    assert sorted(c for _, _, c in layout(host, 6)) == [(1, 1, 1), (2, 1)]


def test_a30_four_slots_and_media_engines(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory(["A30"])
    r = invoke(sim, "partition", "0", "--mig", "2g.12gb,1g.6gb+me", "--reset", "--json")
    doc = as_json(r)
    assert r.exit_code == 0
    assert sorted((p["profile"], p["start"]) for p in doc["placements"]) == [("1g.6gb+me", 3), ("2g.12gb", 0)]
    r = invoke(sim, "partition", "0", "--mig", "2g.12gb+me", "--dry-run")
    assert r.exit_code == 4 and "media engines" in r.stderr
    r = invoke(sim, "mig", "status", "0")
    assert "memory slots  0 1 2 3\n" in r.stdout and "A A . B" in r.stdout


def test_a_request_that_never_fits_an_empty_gpu_is_invalid_input(host: Path) -> None:
    """7g.40gb + 1g.5gb need 8 compute slices and 9 memory slots of an A100's 7 and 8: no layout of
    an empty GPU holds them, so it is bad input (exit 2), not a busy GPU (exit 4)."""
    r = invoke(host, "partition", "gpu0", "--mig", "7g.40gb,1g.5gb", "--dry-run")
    assert r.exit_code == 2 and "can never fit" in r.stderr and "8 of 7 compute slices" in r.stderr
    assert SimNvml(host).mig_mode(0) == (False, False)


def test_a_request_that_does_not_fit_next_to_existing_instances_stays_busy(host: Path) -> None:
    assert invoke(host, "partition", "gpu0", "--mig", "4g.20gb", "--reset").exit_code == 0
    r = invoke(host, "partition", "gpu0", "--mig", "7g.40gb")  # fits an empty A100, not next to the 4g.20gb
    assert r.exit_code == 4 and "can never fit" not in r.stderr and "cannot place" in r.stderr


def test_status_names_compute_instance_profiles_as_gpu_instance_ones(host: Path) -> None:
    """A CI's ``profile`` is NVML's integer (kept: a v1 field never changes type); ``profile_name`` is
    the MIG device name on both levels, as the GI's ``profile`` and mig-parted's configs spell it."""
    r = invoke(host, "partition", "gpu0", "--mig", "3g.20gb", "--ci", "2c.3g.20gb,1c.3g.20gb", "--reset")
    assert r.exit_code == 0
    doc = as_json(invoke(host, "mig", "status", "gpu0", "--json"))
    gi = doc["gpus"][0]["gpu_instances"][0]
    assert gi["profile"] == gi["profile_name"] == "3g.20gb" and isinstance(gi["profile_id"], int)
    cis = sorted(gi["compute_instances"], key=lambda c: c["slices"])
    assert [c["profile_name"] for c in cis] == ["1c.3g.20gb", "2c.3g.20gb"]
    assert all(isinstance(c["profile"], int) for c in cis)
