"""The commands, end to end on simulated hosts (hgx-a100: 8x A100-SXM4-40GB, MIG off)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vgpukit.cli.main import main
from vgpukit.nvml import sim as simdrv
from vgpukit.nvml.sim import SimNvml
from vgpukit.sim.build import init_sim


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = tmp_path / "hgx"
    init_sim(root, "hgx-a100")
    return root


def run(sim: Path, *args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["--sim", str(sim), *args])
    return rc, out.getvalue(), err.getvalue()


def jrun(sim: Path, *args: str) -> tuple[int, dict[str, Any]]:
    rc, out, err = run(sim, *args, "--json")
    return rc, json.loads(out) if out.strip() else {"stderr": err}


def layout(sim: Path, gpu: int = 0) -> list[tuple[int, int, tuple[int, ...]]]:
    n = SimNvml(sim)
    if not n.mig_mode(gpu)[0]:
        return []
    return sorted((g.profile_id, g.start, tuple(c.slices for c in g.compute_instances)) for g in n.gpu_instances(gpu))


def test_partition_on_ampere_with_no_reset_changes_nothing(host: Path) -> None:
    rc, _out, err = run(host, "partition", "gpu0", "--mig", "3g.20gb", "--no-reset")
    assert (
        rc == 4
        and "needs a GPU reset" in err
        and "reset the GPU as part of it: vgpukit partition gpu0 --mig 3g.20gb)" in err
    )
    assert SimNvml(host).mig_mode(0) == (False, False)


def test_partition_resets_an_idle_ampere_gpu_by_default(host: Path) -> None:
    """The issue's own example: enables MIG (reset included, the GPU being idle) and creates the slice."""
    rc, doc = jrun(host, "partition", "gpu0", "--mig", "3g.20gb")
    assert rc == 0 and any("reset" in step for step in doc["plan"])
    assert SimNvml(host).mig_mode(0) == (True, True) and len(layout(host)) == 1
    pid = simdrv.add_client(host, 1, "nvidia-persistenced")
    rc, _, err = run(host, "partition", "gpu1", "--mig", "3g.20gb")
    assert rc == 4 and "nvidia-persistenced" in err and SimNvml(host).mig_mode(1) == (False, False)
    simdrv.remove_client(host, pid)


def test_partition_enables_places_and_is_idempotent(host: Path) -> None:
    rc, doc = jrun(host, "partition", "gpu0", "--mig", "3g.20gb", "--reset")
    assert rc == 0 and doc["schema"] == "vgpukit.mig-partition/v1" and doc["changed"]
    assert doc["placements"] == [{"gpu": 0, "profile": "3g.20gb", "start": 4, "size": 4}]
    gi = doc["gpus"][0]["gpu_instances"][0]
    assert gi["compute_instances"][0]["uuid"].startswith("MIG-")
    rc, doc = jrun(host, "partition", "gpu0", "--mig", "3g.20gb", "--reset")
    assert rc == 0 and doc["plan"] == [] and not doc["changed"]
    rc, out, _ = run(host, "mig", "status", "gpu0")
    assert rc == 0 and "MIG: on" in out and ". . . . A A A A" in out and "4g.20gb" in out


def test_incremental_keeps_busy_instances_and_adds(host: Path) -> None:
    run(host, "partition", "gpu0", "--mig", "1g.5gb", "--reset")
    gi = SimNvml(host).gpu_instances(0)[0]
    simdrv.add_client(host, 0, "trainer", gi=gi.id)
    rc, _, _ = run(host, "partition", "gpu0", "--mig", "1g.5gb,3g.20gb,2g.10gb")
    assert rc == 0
    assert [g.id for g in SimNvml(host).gpu_instances(0) if g.id == gi.id] == [gi.id]
    assert sorted(p for p, _, _ in layout(host)) == [9, 14, 19]
    rc, _, err = run(host, "partition", "gpu0", "--mig", "4g.20gb", "--replace")
    assert rc == 4 and "trainer" in err  # never destroys a busy instance
    assert len(layout(host)) == 3


def test_dry_run_reports_fit_and_changes_nothing(host: Path) -> None:
    rc, doc = jrun(host, "partition", "gpu1", "--mig", "1g.5gb=2,2g.10gb,3g.20gb", "--reset", "--dry-run")
    assert rc == 0 and doc["dry_run"] and not doc["changed"]
    assert sorted((p["profile"], p["start"]) for p in doc["placements"]) == [
        ("1g.5gb", 2),
        ("1g.5gb", 3),
        ("2g.10gb", 0),
        ("3g.20gb", 4),
    ]
    assert SimNvml(host).mig_mode(1) == (False, False)
    rc, _, err = run(host, "partition", "gpu1", "--mig", "3g.20gb=2,1g.5gb", "--reset", "--dry-run")
    assert rc == 4 and "memory slots" in err


def test_bad_input(host: Path) -> None:
    rc, _, err = run(host, "partition", "gpu0", "--mig", "5g.25gb", "--reset")
    assert rc == 2 and "valid: 1g.5gb" in err and "7g.40gb" in err
    rc, _, err = run(host, "partition", "gpu0", "--mig", "3g.20gb=3", "--reset")
    assert rc == 2 and "at most 2" in err
    rc, _, err = run(host, "partition", "gpu0", "--mig", "3g.20gb", "--ci", "2c.3g.20gb=2", "--reset")
    assert rc == 2 and "does not fit" in err
    rc, _, err = run(host, "partition", "gpu9", "--mig", "3g.20gb")
    assert rc == 3
    assert SimNvml(host).mig_mode(0) == (False, False)


def test_not_mig_capable(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory([None])
    rc, _, err = run(sim, "partition", "0", "--mig", "1g.5gb")
    assert rc == 5 and "not MIG-capable" in err


def test_failure_half_way_rolls_back_everything(host: Path) -> None:
    simdrv.add_fault(host, "CreateGpuInstance", "UNKNOWN", nth=3)
    rc, _, err = run(host, "partition", "gpu2", "--mig", "1g.5gb=4", "--reset")
    assert rc == 1 and "rolled back" in err
    assert SimNvml(host).mig_mode(2) == (False, False)
    assert not list((host / "dev" / "nvidia-caps").glob("nvidia-cap*"))


def test_failure_half_way_keeps_what_existed(host: Path) -> None:
    run(host, "partition", "gpu0", "--mig", "3g.20gb", "--reset")
    before = layout(host)
    simdrv.add_fault(host, "CreateComputeInstance", "UNKNOWN", nth=2)
    rc, _, _ = run(host, "partition", "gpu0", "--mig", "3g.20gb,2g.10gb,1g.5gb")
    assert rc == 1 and layout(host) == before


def test_hopper_needs_no_reset(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory(["H100-SXM5-80GB"])
    rc, doc = jrun(sim, "partition", "0", "--mig", "3g.40gb,2g.20gb")
    assert rc == 0 and [s for s in doc["plan"] if "reset" in s] == []
    assert sorted(p for p, _, _ in layout(sim)) == [9, 14]


def test_hopper_held_by_a_client_rolls_the_mode_back(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory(["H100-SXM5-80GB"])
    simdrv.add_client(sim, 0, "python3")
    rc, _, err = run(sim, "partition", "0", "--mig", "1g.10gb")
    assert rc == 4 and "pending" in err and "rolled back" in err
    assert SimNvml(sim).mig_mode(0) == (False, False)


def test_gpu_named_by_uuid_or_address(host: Path) -> None:
    gpu = SimNvml(host).gpus()[5]
    rc, doc = jrun(host, "partition", gpu.uuid, "--mig", "2g.10gb", "--reset")
    assert rc == 0 and doc["gpus"][0]["bdf"] == gpu.bdf and doc["gpus"][0]["gpu"] == "gpu5"
    rc, doc = jrun(host, "mig", "status", gpu.bdf.split(":", 1)[1])
    assert rc == 0 and doc["gpus"][0]["compute_slices"] == {"total": 7, "free": 5}


def test_pending_mode_is_reported_and_needs_reset(host: Path) -> None:
    SimNvml(host).set_mig_mode(3, True)
    rc, doc = jrun(host, "mig", "status", "gpu3")
    assert doc["gpus"][0]["mig"] == {"current": False, "pending": True, "change_pending": True}
    rc, _, err = run(host, "partition", "gpu3", "--mig", "1g.5gb", "--no-reset")
    assert rc == 4 and "reset" in err
    pid = simdrv.add_client(host, 3, "nvidia-persistenced")
    rc, _, err = run(host, "partition", "gpu3", "--mig", "1g.5gb", "--reset")
    assert rc == 4 and "nvidia-persistenced" in err
    simdrv.remove_client(host, pid)
    assert run(host, "partition", "gpu3", "--mig", "1g.5gb", "--reset")[0] == 0


def test_destroy_and_disable(host: Path) -> None:
    run(host, "partition", "gpu0", "--mig", "1g.5gb=2", "--reset")
    busy = SimNvml(host).gpu_instances(0)[0]
    pid = simdrv.add_client(host, 0, "trainer", gi=busy.id)
    rc, _, err = run(host, "mig", "destroy", "gpu0", "--all")
    assert rc == 4 and "trainer" in err and len(layout(host)) == 2
    rc, _, err = run(host, "mig", "destroy", "gpu0", "--all", "--force")
    assert rc == 4 and "skipped" in err and len(layout(host)) == 1
    rc, _, err = run(host, "mig", "disable", "gpu0")
    assert rc == 4 and "mig destroy" in err
    simdrv.remove_client(host, pid)
    assert run(host, "mig", "destroy", "gpu0", "--gi", str(busy.id))[0] == 0
    rc, out, _ = run(host, "mig", "disable", "gpu0", "--no-reset")
    assert rc == 0 and "reset" in out and SimNvml(host).mig_mode(0) == (True, False)
    assert run(host, "mig", "disable", "gpu0", "--reset")[0] == 0
    assert SimNvml(host).mig_mode(0) == (False, False)


def test_profiles(host: Path) -> None:
    rc, doc = jrun(host, "mig", "profiles", "gpu0")
    assert rc == 0
    p = next(r for r in doc["profiles"] if r["name"] == "3g.20gb")
    assert (p["id"], p["slices"], p["max_count"]) == (9, 3, 2)
    assert p["placements"] == [{"start": 0, "size": 4}, {"start": 4, "size": 4}]
    assert "1c.3g.20gb" in p["compute_instances"]


def test_subdivided_instance_counts_unless_ci_layout_is_asked(host: Path) -> None:
    run(host, "partition", "gpu6", "--mig", "3g.20gb", "--ci", "1c.3g.20gb=3", "--reset")
    rc, doc = jrun(host, "partition", "gpu6", "--mig", "3g.20gb")
    assert rc == 0 and doc["plan"] == []  # any 3g.20gb satisfies a request that names no --ci
    rc, doc = jrun(host, "partition", "gpu6", "--mig", "3g.20gb", "--ci", "2c.3g.20gb,1c.3g.20gb")
    assert rc == 0 and len(layout(host, 6)) == 2  # a different layout was asked: a second GI
    assert sorted(c for _, _, c in layout(host, 6)) == [(1, 1, 1), (2, 1)]


def test_a30_four_slots_and_media_engines(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory(["A30"])
    rc, doc = jrun(sim, "partition", "0", "--mig", "2g.12gb,1g.6gb+me", "--reset")
    assert rc == 0
    assert sorted((p["profile"], p["start"]) for p in doc["placements"]) == [("1g.6gb+me", 3), ("2g.12gb", 0)]
    rc, _, err = run(sim, "partition", "0", "--mig", "2g.12gb+me", "--dry-run")
    assert rc == 4 and "media engines" in err
    rc, out, _ = run(sim, "mig", "status", "0")
    assert "memory slots  0 1 2 3\n" in out and "A A . B" in out
