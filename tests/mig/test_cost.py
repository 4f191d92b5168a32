"""What ``mig apply`` costs, counted (never timed: speed targets live in benchmarks/scale)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import as_json, invoke
from vgpukit.mig.steps import CreateGi
from vgpukit.sim.build import init_sim
from vgpukit.sim.nvml import SimNvml

from .mig_helpers import enable_now, make_sim

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


def _fold_share(root: Path, gpus: int) -> float:
    """Bytes of whole-state rewrites per byte of change lines, for the same calls on GPU 0."""
    sim = make_sim(root, ["A100-SXM4-40GB"] * gpus)
    enable_now(sim, 0)
    nvml = SimNvml(sim)
    nvml.mig_mode(0)
    appended = folded = 0
    for _ in range(150):  # past 64 KiB of lines
        for call in range(2):
            assert nvml.store.stamp is not None
            _, gen, log = nvml.store.stamp
            if call == 0:
                gi = nvml.create_gpu_instance(0, 19)  # 1g.5gb
            else:
                nvml.destroy_gpu_instance(0, gi.id)
            base, now, new_log = nvml.store.stamp
            if now != gen:
                folded += base[1]
            else:
                assert new_log is not None
                appended += new_log[1] - (log[1] if log else 0)
    return folded / appended


def test_the_driver_state_is_folded_in_proportion_to_its_size(tmp_path: Path) -> None:
    """A call's share of the rewrites of nvml.json does not grow with the GPUs on the host (folding
    past a fixed 64 KiB of lines made it grow as the state: 5x from 8 to 40 GPUs)."""
    small, large = _fold_share(tmp_path / "8", 8), _fold_share(tmp_path / "40", 40)
    assert small > 0 and large <= 1.5 * small


def test_apply_without_hooks_plans_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a hooks file there is nothing to fail before: the plan made under the host lock is
    the only one (before, a first plan ran outside the lock and read every GPU's health twice)."""
    from vgpukit.mig import migparted

    sim = tmp_path / "hgx"
    init_sim(sim, "hgx-a100")
    (tmp_path / "mig.yaml").write_text(CONFIG)
    calls = [0]
    build = migparted.build_plans

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return build(*args, **kwargs)

    monkeypatch.setattr(migparted, "build_plans", counted)
    r = invoke(sim, "mig", "apply", "-f", str(tmp_path / "mig.yaml"), "--reset")
    assert r.exit_code == 0, r.output
    assert calls[0] == 1
