"""Crash consistency: kill -9 a mutating command between any two of its kernel writes, then

* ``vgpukit recover`` puts the host back exactly as it was before the command, or
* re-running the command converges to exactly what an uninterrupted run gives,

with no journal left, no lost bind record, and a second re-run changing nothing.

Kill points are the command's own kernel writes (the simulated kernel kills the process just before
its Nth write, ``VGPUKIT_SIM_CRASH_AT_WRITE``), a seeded sample of each command's writes, plus
timed kills at seeded random moments (which also land between journal and file writes).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.engine.helpers import facts, fresh, journal_left, start, vgpukit

SEED = 20261123
POINTS_PER_SCENARIO = 4
TIMED_KILLS = 6


@dataclass(frozen=True)
class Scenario:
    name: str
    profile: str
    setup: tuple[tuple[str, ...], ...]
    command: tuple[str, ...]
    idempotent: bool = True  # "create N more" commands are not; their re-run must still give exactly N


SCENARIOS = [
    Scenario("sriov-enable-vfio", "hgx-a100", (), ("sriov", "enable", "nic0", "--vfs", "16", "--driver", "vfio-pci")),
    Scenario(
        "sriov-change-count",
        "hgx-a100",
        (("sriov", "enable", "nic0", "--vfs", "6", "--driver", "vfio-pci"),),
        ("sriov", "enable", "nic0", "--vfs", "4", "--driver", "vfio-pci"),
    ),
    Scenario(
        "sriov-disable",
        "hgx-a100",
        (("sriov", "enable", "nic0", "--vfs", "6", "--driver", "vfio-pci"),),
        ("sriov", "disable", "nic0"),
    ),
    Scenario("bind-gpu", "hgx-a100", (), ("bind", "gpu0", "--driver", "vfio-pci")),
    Scenario(
        "mdev-create-define",
        "t4-mdev",
        (),
        ("mdev", "create", "--type", "nvidia-222", "--count", "20", "--define"),
        idempotent=False,
    ),
    Scenario(
        "vgpu-create",
        "h100-vgpu",
        (),
        ("vgpu", "create", "gpu0", "--type", "H100-10C", "--count", "6"),
        idempotent=False,
    ),
]


def normal(f: dict[str, Any]) -> dict[str, Any]:
    """Facts without names chosen at random (mdev UUIDs): counts, and instance/definition pairing."""
    out = dict(f)
    defs = {d.split("/")[-1] for d in f["definitions"]}
    out["mdevs"] = (len(f["mdevs"]), set(f["mdevs"]) == defs or not defs)
    out["definitions"] = len(f["definitions"])
    return out


def vgpu_types(sim: Path) -> list[Any]:
    r = vgpukit(sim, "vgpu", "list", "--json")
    return (
        sorted((v.get("id"), v.get("type")) for v in json.loads(r.stdout).get("vgpus", [])) if r.returncode == 0 else []
    )


def prepared(tmp: Path, sc: Scenario, name: str) -> Path:
    sim = fresh(tmp, sc.profile, name)
    for cmd in sc.setup:
        r = vgpukit(sim, *cmd)
        assert r.returncode == 0, r.stderr
    return sim


def kernel_writes(tmp: Path, sc: Scenario) -> tuple[int, dict[str, Any], list[Any]]:
    """How many control-file writes an uninterrupted run makes, and the state it leaves."""
    sim = prepared(tmp, sc, "clean")
    r = vgpukit(sim, "--debug", *sc.command)
    assert r.returncode == 0, r.stderr
    writes = sum(1 for line in r.stderr.splitlines() if line.startswith("vgpukit.host: write '"))
    assert writes > 0
    if sc.idempotent:
        again = vgpukit(sim, "--json", *sc.command)
        assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False, again.stdout
    return writes, normal(facts(sim)), vgpu_types(sim)


KILLS: list[str] = []


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_kill_at_every_sampled_write_then_converge(tmp_path: Path, sc: Scenario) -> None:
    writes, clean_after, clean_vgpus = kernel_writes(tmp_path, sc)
    rnd = random.Random(f"{SEED}-{sc.name}")
    points = sorted({1, writes} | set(rnd.sample(range(1, writes + 1), min(POINTS_PER_SCENARIO, writes))))
    for i, n in enumerate(points):
        sim = prepared(tmp_path, sc, f"k{n}")
        before = facts(sim)
        p = vgpukit(sim, *sc.command, env={"VGPUKIT_SIM_CRASH_AT_WRITE": str(n)})
        assert p.returncode == -9, f"kill point {n}/{writes} did not kill: {p.stderr}"
        KILLS.append(f"{sc.name}@{n}/{writes}")
        assert journal_left(sim)
        if i % 2 == 0:
            r = vgpukit(sim, "recover")
            assert r.returncode == 0, r.stderr
            assert not journal_left(sim)
            assert facts(sim) == before, f"{sc.name}: recover after kill at write {n} did not restore the host"
        r = vgpukit(sim, *sc.command)
        assert r.returncode == 0, f"{sc.name}: re-run after kill at write {n}: {r.stderr}"
        assert not journal_left(sim)
        assert normal(facts(sim)) == clean_after, f"{sc.name}: kill at write {n} then re-run differs"
        if sc.name == "vgpu-create":
            assert [t for _, t in vgpu_types(sim)] == [t for _, t in clean_vgpus]
        if sc.idempotent:
            again = vgpukit(sim, "--json", *sc.command)
            assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False


@pytest.mark.parametrize("sc", [SCENARIOS[0], SCENARIOS[4]], ids=["sriov-enable-vfio", "mdev-create-define"])
def test_timed_kills_then_converge(tmp_path: Path, sc: Scenario) -> None:
    _, clean_after, _ = kernel_writes(tmp_path, sc)
    timing = prepared(tmp_path, sc, "timing")
    t0 = time.monotonic()
    assert vgpukit(timing, *sc.command).returncode == 0
    took = time.monotonic() - t0  # kills land inside the command however fast it is on this machine
    rnd = random.Random(f"{SEED}-timed-{sc.name}")
    for k in range(TIMED_KILLS // 2):
        sim = prepared(tmp_path, sc, f"t{k}")
        before = facts(sim)
        p = start(sim, *sc.command)
        time.sleep(rnd.uniform(0.3, 0.95) * took)
        p.kill()
        p.communicate(timeout=30)
        if p.returncode == 0 or (not journal_left(sim) and normal(facts(sim)) == clean_after):
            assert normal(facts(sim)) == clean_after  # the change was done before the kill: nothing to repair
            continue
        KILLS.append(f"{sc.name}@timed")
        # A kill lands anywhere: before the first change, mid-change, or after the change was complete
        # (journal already cleared, process still reporting). After `recover` the host is exactly one of
        # the two whole states, never in between; only the "before" one is re-run (mdev create --count is
        # not idempotent: re-running a completed one would ask for 20 more).
        r = vgpukit(sim, "recover")
        assert r.returncode == 0, r.stderr
        assert not journal_left(sim)
        if normal(facts(sim)) == clean_after:
            continue
        assert facts(sim) == before, f"{sc.name}: timed kill left neither the before nor the after state"
        r = vgpukit(sim, *sc.command)
        assert r.returncode == 0, r.stderr
        assert not journal_left(sim)
        assert normal(facts(sim)) == clean_after


def test_report_kill_points(capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\ncrash consistency: {len(KILLS)} kill points tried, all converged")
