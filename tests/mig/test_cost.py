"""What ``mig apply`` costs, counted (never timed: speed targets live in benchmarks/scale)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import as_json, invoke
from vgpukit.mig.steps import CreateGi
from vgpukit.sim.build import init_sim

CONFIG = (
    "version: v1\nmig-configs:\n  mixed:\n    - devices: all\n      mig-enabled: true\n"
    '      mig-devices: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}\n'
)


def test_the_report_finds_each_placement_without_comparing_it_with_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The placements of the report are the CreateGi steps done: looked up, not searched for in the
    list of every step of every GPU (that grew as the square of the GPUs: 8 GPUs, ~1,300 compares)."""
    sim = tmp_path / "hgx"
    init_sim(sim, "hgx-a100")
    (tmp_path / "mig.yaml").write_text(CONFIG)
    compares = [0]
    equal = CreateGi.__eq__

    def counted(self: CreateGi, other: Any) -> Any:
        compares[0] += 1
        return equal(self, other)

    monkeypatch.setattr(CreateGi, "__eq__", counted)
    r = invoke(sim, "--json", "--dry-run", "mig", "apply", "-f", str(tmp_path / "mig.yaml"), "--reset")
    doc = as_json(r)
    assert r.exit_code == 0 and len(doc["placements"]) == 8 * 4
    assert compares[0] <= len(doc["placements"])
