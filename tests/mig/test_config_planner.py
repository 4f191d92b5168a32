"""The MIG config planner below the front ends: a typed request in, steps or a typed refusal out, with
no command, click context or callback around it (``vgpukit apply`` and ``mig apply`` both call it)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from vgpukit.errors import InvalidInput
from vgpukit.fleet import plan as fleet_plan
from vgpukit.host import Host
from vgpukit.mig import config
from vgpukit.mig.migparted import MigRequest, plan_config
from vgpukit.mig.planner import NeverFits
from vgpukit.mig.steps import CreateGi
from vgpukit.pci import Scan
from vgpukit.sim.build import init_sim
from vgpukit.sim.nvml import SimNvml

TEXT = """\
version: v1
mig-configs:
  half:
    - devices: [0, 9]
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
  never:
    - devices: [1]
      mig-enabled: true
      mig-devices: {"7g.40gb": 1, "1g.5gb": 1}
"""


def test_the_config_planner_takes_a_typed_request_and_returns_steps_or_a_typed_refusal(tmp_path: Path) -> None:
    sim = tmp_path / "hgx"
    init_sim(sim, "hgx-a100")
    nvml, scan = SimNvml(sim), Scan(Host(sim))
    configs = config.parse(TEXT, "c.yaml")
    found = plan_config(nvml, scan, MigRequest(configs["half"], "c.yaml", "half"))
    assert [s.profile for s in found.steps if isinstance(s, CreateGi)] == ["3g.20gb", "3g.20gb"]
    assert found.warnings == [
        "c.yaml:4: config half: devices: index 9 names no GPU here (8 GPUs): the entry skips it, as mig-parted does"
    ]
    with pytest.raises(InvalidInput, match="index 9 names no GPU here"):
        plan_config(nvml, scan, MigRequest(configs["half"], "c.yaml", "half", strict=True))
    with pytest.raises(NeverFits, match="can never fit"):
        plan_config(nvml, scan, MigRequest(configs["never"], "c.yaml", "never"))
    assert SimNvml(sim).mig_mode(0) == (False, False)  # planning changes nothing


def test_fleet_plans_mig_without_a_callback_from_the_front_end() -> None:
    assert list(inspect.signature(fleet_plan.plan).parameters) == ["env", "cfg"]
    assert not hasattr(fleet_plan, "MigPlanner")
