"""MIG steps as data: one dataclass per action, each describing itself, undone by keyed inverses."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Run
from vgpukit.engine import Env
from vgpukit.host import Host
from vgpukit.mig.steps import STEP_TYPES, CreateCi, CreateGi, DestroyCi, DestroyGi, Reset, SetMode
from vgpukit.sim import nvml as simdrv
from vgpukit.sim.nvml import SimNvml

from .mig_helpers import enable_now

BDF = "0000:07:00.0"
LABEL = "gpu0 (0000:07:00.0)"


def full_layout(sim: Path, gpu: int = 0) -> list[tuple[int, int, tuple[tuple[int, int], ...]]]:
    """(profile, start, ((ci start, ci slices), ...)) of every GPU instance: ids left out on purpose."""
    n = SimNvml(sim)
    if not n.mig_mode(gpu)[0]:
        return []
    return sorted(
        (g.profile_id, g.start, tuple(sorted((c.start, c.slices) for c in g.compute_instances)))
        for g in n.gpu_instances(gpu)
    )


def test_every_action_is_its_own_frozen_type_with_text_and_a_json_form() -> None:
    steps = [
        DestroyCi(BDF, LABEL, 9, 4, 0, 1, gi_id=2, ci_id=0, uuid="MIG-x"),
        DestroyGi(BDF, LABEL, 9, "3g.20gb", 4, 4, gi_id=2),
        SetMode(BDF, LABEL, True, then_reset=True),
        Reset(BDF, LABEL, True),
        CreateGi(BDF, LABEL, 9, "3g.20gb", 4, 4),
        CreateCi(BDF, LABEL, 9, 4, 1, "1c.3g.20gb"),
    ]
    assert [type(s) for s in steps] == list(STEP_TYPES)
    assert len({t.kind for t in STEP_TYPES}) == len(STEP_TYPES)
    for s in steps:
        d = json.loads(json.dumps(s.to_dict()))
        assert d["kind"] == s.kind and d["text"] == s.describe() and d["bdf"] == BDF
        assert s.describe().startswith(f"{LABEL}: ")
        assert type(s)(**{k: v for k, v in d.items() if k not in ("kind", "text")}) == s
    assert steps[4].describe() == f"{LABEL}: create GPU instance 3g.20gb at slots 4-7"
    assert steps[0].describe() == f"{LABEL}: destroy compute instance 0 of GI 2 (MIG-x)"


def test_the_json_plan_comes_from_the_steps(hgx: Path, run_cli: Run) -> None:
    r = run_cli(hgx, "partition", "0", "--mig", "3g.20gb", "--ci", "1c.3g.20gb=2", "--dry-run", "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["dry_run"]
    assert [s["kind"] for s in doc["steps"]] == [
        "mig-set-mode",
        "mig-reset",
        "mig-create-gi",
        "mig-create-ci",
        "mig-create-ci",
    ]
    assert [s["text"] for s in doc["steps"]] == doc["plan"]
    assert doc["steps"][2]["start"] == doc["placements"][0]["start"]


def test_a_failed_destroy_puts_the_compute_instances_back(hgx: Path, run_cli: Run) -> None:
    enable_now(hgx, 0)
    assert run_cli(hgx, "partition", "0", "--mig", "3g.20gb", "--ci", "1c.3g.20gb=3").exit_code == 0
    assert run_cli(hgx, "partition", "0", "--mig", "2g.10gb").exit_code == 0
    before = full_layout(hgx)
    assert sum(len(cis) for _, _, cis in before) == 4
    simdrv.add_fault(hgx, "DestroyGpuInstance", "UNKNOWN", nth=2)
    r = run_cli(hgx, "mig", "destroy", "0", "--all")
    assert r.exit_code == 1 and "rolled back" in r.stderr
    assert full_layout(hgx) == before


def test_inverses_are_idempotent_and_keyed_by_placement(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory(["A100-SXM4-40GB"])
    enable_now(sim, 0)
    n = SimNvml(sim)
    env = Env(Host(sim), lambda: n)
    bdf = n.gpus()[0].bdf
    create = CreateGi(bdf, LABEL, 9, "3g.20gb", 4, 4)
    undo = create.inverse(env)
    assert undo == DestroyGi(bdf, LABEL, 9, "3g.20gb", 4, 4)
    create.apply(env)
    create.apply(env)  # ensured: still one
    ci = CreateCi(bdf, LABEL, 9, 4, 1, "1c.3g.20gb")
    ci_undo = ci.inverse(env)
    assert isinstance(ci_undo, DestroyCi) and ci_undo.gi_start == 4 and ci_undo.start == 0
    ci.apply(env)
    assert full_layout(sim) == [(9, 4, ((0, 1),))]
    # a GI recreated elsewhere in between gets other ids: the keys still find it
    for step in (ci_undo, ci_undo, undo, undo):
        step.apply(env)
    assert full_layout(sim) == []
    assert create.inverse(env) == undo and undo.inverse(env) is None
