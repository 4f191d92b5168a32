"""kill -9 in the middle of ``mig apply``: the journal of keyed inverses repairs the GPUs.

The simulated driver kills the process just before its Nth state-changing call
(``VGPUKIT_SIM_CRASH_AT_NVML_CALL``). After each kill, ``vgpukit recover`` puts the MIG layout back
exactly as it was before the command, and re-running the command instead converges to exactly what
an uninterrupted run gives, a further run changing nothing. Layouts are compared by profile and
placement (GI and CI ids are the driver's and change on re-creation).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke
from tests.engine.helpers import fresh, journal_left, vgpukit
from vgpukit.sim.nvml import CRASH_ENV, SimNvml

CONFIG = """version: v1
mig-configs:
  balanced:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "2g.10gb": 1
        "1c.3g.20gb": 2
        "1g.5gb": 2
"""
SEED = 20261123
SAMPLED_POINTS = 2


def mig_facts(sim: Path) -> list[Any]:
    n = SimNvml(sim)
    out: list[Any] = []
    for g in (0, 1):
        mode = n.mig_mode(g)
        gis = n.gpu_instances(g) if mode[0] else []
        layout = sorted(
            (gi.profile_id, gi.start, tuple(sorted((c.start, c.slices) for c in gi.compute_instances))) for gi in gis
        )
        out.append((mode, layout))
    return out


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """gpu0 carved 3g.20gb (three 1c CIs) + 2g.10gb, gpu1 MIG off: the config changes both."""
    sim = fresh(tmp_path_factory.mktemp("mig-crash"), "hgx-a100")
    assert invoke(sim, "partition", "gpu0", "--mig", "3g.20gb,2g.10gb", "--ci", "1c.3g.20gb=3").exit_code == 0
    (sim / "mig.yaml").write_text(CONFIG)
    return sim


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def apply(sim: Path, crash_at: int = 0) -> Any:
    env = {CRASH_ENV: str(crash_at)} if crash_at else None
    return vgpukit(sim, "mig", "apply", "-f", str(sim / "mig.yaml"), "--json", env=env)


def test_kill_9_mid_mig_apply_is_repaired(before: Path, tmp_path: Path) -> None:
    start = mig_facts(before)
    done = copy(before, tmp_path / "done")
    r = apply(done)
    assert r.returncode == 0, r.stderr
    after = mig_facts(done)
    assert after != start and json.loads(apply(done).stdout)["plan"] == []
    # how many driver changes an uninterrupted run makes: a kill at call N > that lets it finish
    lo, hi = 1, 128  # apply(crash at lo) is killed, apply(crash at hi) finishes
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if apply(copy(before, tmp_path / f"count{mid}"), mid).returncode == 0:
            hi = mid
        else:
            lo = mid
    calls = lo
    assert calls >= 8
    points = sorted({1, calls, *random.Random(SEED).sample(range(2, calls), SAMPLED_POINTS)})
    for n in points:
        killed = copy(before, tmp_path / f"recover{n}")
        assert apply(killed, n).returncode == -9
        assert journal_left(killed)
        r = vgpukit(killed, "recover")
        assert r.returncode == 0 and "recovering an interrupted change" in r.stderr + r.stdout, r.stderr
        assert mig_facts(killed) == start, f"recover after a kill at driver call {n}"
        assert not journal_left(killed)

        rerun = copy(before, tmp_path / f"rerun{n}")
        assert apply(rerun, n).returncode == -9
        r = apply(rerun)
        assert r.returncode == 0, r.stderr
        assert mig_facts(rerun) == after, f"re-run after a kill at driver call {n}"
        assert json.loads(apply(rerun).stdout)["plan"] == [] and not journal_left(rerun)
