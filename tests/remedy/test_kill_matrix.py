"""kill -9 at every change of ``vgpukit remediate``, then the next command (issue 35, "Proof").

gpu3 of a simulated hgx-a100 carries three MIG slices and reported XID 95. ``remediate gpu3`` is killed
just before each of its changes through the host door (``VGPUKIT_SIM_CRASH_AT_CHANGE``: the quarantine
record, the reset's record, the release, the history) and before each of its driver calls
(``VGPUKIT_SIM_CRASH_AT_NVML_CALL``: every MIG instance taken down and made again). After each kill
the next command repairs it: ``vgpukit recover`` (the journal's inverses), or the same ``remediate``
again (which repairs first, then does its work). Either way the device ends as before (not reset, its
layout as it was) or fully restored (reset, the same layout), never half-way, and it is quarantined
exactly while it is not verified healthy (a kill between the reset and its record leaves a reset device
the health layer cannot yet call healthy: quarantined, the next remediate verifies it); the other GPUs
never change and no journal is left.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke
from tests.engine.helpers import fresh, journal_left, vgpukit
from tests.remedy.test_remediate_sim import gpus, layout
from vgpukit.sim.kernel import CRASH_CHANGE_ENV
from vgpukit.sim.nvml import CRASH_ENV as NVML_ENV

QUARANTINE = "var/lib/vgpukit/quarantine/0000:24:00.0.json"


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sim = fresh(tmp_path_factory.mktemp("remedy-kill"), "hgx-a100")
    assert invoke(sim, "partition", "gpu3", "--mig", "3g.20gb,2g.10gb,1g.5gb").exit_code == 0
    assert invoke(sim, "partition", "gpu2", "--mig", "3g.20gb").exit_code == 0
    assert invoke(sim, "sim", "fault", "xid", "gpu3", "95").exit_code == 0
    return sim


def copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def unusable(sim: Path) -> bool:
    doc = json.loads(invoke(sim, "health", "gpu3", "--json").stdout)
    return bool(doc["devices"][0]["state"] == "unusable")


def check(sim: Path, start: list[dict[str, Any]], what: str) -> str:
    """The device is as before or fully restored, quarantined exactly while unverified; returns which."""
    now = gpus(sim)
    assert layout(now[3]) == layout(start[3]), what
    assert [g for i, g in enumerate(now) if i != 3] == [g for i, g in enumerate(start) if i != 3], what
    assert not journal_left(sim), what
    reset = now[3].get("resets", 0) >= 1
    sick = unusable(sim)
    assert reset or sick, what  # not reset: still the XID 95's ECC error
    assert (sim / QUARANTINE).exists() == sick, what  # quarantined until verified, released once verified
    assert now[3].get("persistence", True), what  # persistence mode is never left off
    if not reset:
        return "as before"
    # reset but killed before its record was written: the XID still counts, so not verified (quarantined)
    return "reset, not verified" if sick else "restored"


def run(sim: Path, env: dict[str, str] | None = None) -> Any:
    return vgpukit(sim, "remediate", "gpu3", "--json", env=env, timeout=120)


@pytest.mark.parametrize("var", [CRASH_CHANGE_ENV, NVML_ENV], ids=["host-door-change", "driver-call"])
def test_kill_9_at_every_change_of_remediate(before: Path, tmp_path: Path, var: str) -> None:
    start = gpus(before)
    whole = copy(before, tmp_path / "whole")
    r = run(whole)
    assert r.returncode == 0, r.stderr
    assert check(whole, start, "uninterrupted") == "restored"
    seen: dict[str, list[int]] = {}
    n = 0
    while True:
        n += 1
        assert n < 60, "remediate never finished"
        killed = copy(before, tmp_path / f"kill{n}")
        r = run(killed, {var: str(n)})
        if r.returncode != -9:  # past the last change: it ran to the end
            assert r.returncode == 0, r.stderr
            break
        again = copy(killed, tmp_path / f"again{n}")  # the same killed host, for the other way to repair it
        rec = vgpukit(killed, "recover")
        assert rec.returncode == 0, rec.stderr
        seen.setdefault(check(killed, start, f"recover after a kill at change {n}"), []).append(n)
        r = run(again)  # the next command: repairs the interrupted run, then remediates
        assert r.returncode == 0, r.stderr
        assert check(again, start, f"remediate after a kill at change {n}") == "restored"
    assert n > 3
    print(f"{var}: {n - 1} kill points, outcomes after recover: {seen}")
