"""A GPU instance at a placement someone else chose (the Kubernetes scheduler, for a DRA device made on
demand): ``planner.why_not_at`` / ``open_placements`` agree with the complete search, and
``layout.plan_gi_at`` / ``plan_remove_at`` plan it on a simulated GPU or refuse with the reason."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import invoke, make_sim
from vgpukit.engine import execute
from vgpukit.errors import Busy, Conflict, InvalidInput, NoCapacity
from vgpukit.mig import layout
from vgpukit.mig.planner import Occupant, most_in_a_layout, open_placements, why_not_at
from vgpukit.nvml import GiProfile
from vgpukit.nvml.table import model, models
from vgpukit.sim.nvml import SimNvml

MODELS = sorted(models())


def _random_occupants(key: str, seed: int) -> list[Occupant]:
    """Instances placed one by one at random open placements (a layout the GPU can hold)."""
    profiles = model(key).profiles
    rng = random.Random(seed)
    occ: list[Occupant] = []
    for _ in range(rng.randrange(0, 5)):
        free = open_placements(profiles, occ)
        if not free:
            break
        pl = rng.choice(free)
        occ.append(Occupant(pl.profile.id, pl.start, pl.profile.size, f"GI {len(occ)}"))
    return occ


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(MODELS), seed=st.integers(0, 2**32))
def test_open_placements_are_exactly_those_the_search_can_add(key: str, seed: int) -> None:
    profiles = model(key).profiles
    occ = _random_occupants(key, seed)
    opened = {(pl.profile.id, pl.start) for pl in open_placements(profiles, occ)}
    for p in profiles:
        for s in p.starts:
            fits = _alone_fits(profiles, occ, p, s)
            assert ((p.id, s) in opened) == fits
            assert (why_not_at(profiles, occ, p, s) is None) == ((p.id, s) in opened)


def _alone_fits(profiles: list[GiProfile], occ: list[Occupant], p: GiProfile, s: int) -> bool:
    """Independently: no memory slot twice, no profile over its count, one media-engine owner at most."""
    pinned = [*occ, Occupant(p.id, s, p.size, "new")]
    slots = [c for o in pinned for c in range(o.start, o.start + o.size)]
    return len(slots) == len(set(slots)) and _counts_ok(profiles, pinned)


def _counts_ok(profiles: list[GiProfile], occ: list[Occupant]) -> bool:
    by = {p.id: p for p in profiles}
    counts: dict[int, int] = {}
    for o in occ:
        counts[o.profile_id] = counts.get(o.profile_id, 0) + 1
    media = sum(1 for o in occ if by[o.profile_id].media)
    return media <= 1 and all(n <= by[pid].max_count for pid, n in counts.items())


def test_capacities_bound_every_layout() -> None:
    a100 = model("A100-SXM4-40GB").profiles
    assert [most_in_a_layout(a100, v) for v in ("slices", "sms", "memory_mib")] == [7, 98, 40192]


def _sim(tmp_path: Path) -> tuple[Path, SimNvml]:
    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "partition", "gpu0", "--mig", "3g.20gb").exit_code == 0  # MIG on, slots 0-3 or 4-7
    return sim, SimNvml(sim)


def test_plan_gi_at_creates_at_the_start_or_refuses_with_the_reason(tmp_path: Path) -> None:
    from vgpukit.clikit.context import App
    from vgpukit.wiring import Wiring

    sim, nvml = _sim(tmp_path)
    gpu0, gpu1 = nvml.gpus()[:2]
    (gi,) = nvml.gpu_instances(0)
    free = 4 if gi.start == 0 else 0
    taken = gi.start
    with pytest.raises(NoCapacity, match=r"2g\.10gb at slots .*: taken \(slots .* by GI"):
        layout.plan_gi_at(nvml, layout.GiAtRequest(gpu0, 14, taken))
    with pytest.raises(InvalidInput, match="has no placement at slot 1"):
        layout.plan_gi_at(nvml, layout.GiAtRequest(gpu0, 14, 1))
    with pytest.raises(Conflict, match="MIG mode is off"):
        layout.plan_gi_at(nvml, layout.GiAtRequest(gpu1, 14, 0))
    plan = layout.plan_gi_at(nvml, layout.GiAtRequest(gpu0, 14, free))
    assert [s.kind for s in plan.steps] == ["mig-create-gi", "mig-create-ci"]
    nvml.close()
    app = App(sim_dir=sim, wiring=Wiring())
    try:
        execute(app.env, plan.steps)
        assert layout.plan_gi_at(app.nvml, layout.GiAtRequest(gpu0, 14, free, ours=True)).steps == []  # kept
        made = next(g for g in app.nvml.gpu_instances(0) if g.start == free)
        assert made.profile_id == 14 and len(made.compute_instances) == 1
        pid = invoke(sim, "sim", "client", "add", "0", "train", "--gi", str(made.id)).stdout.strip()
        with pytest.raises(Busy, match="is used by"):
            layout.plan_remove_at(app.nvml, gpu0, 14, free)
        invoke(sim, "sim", "client", "remove", pid)
        execute(app.env, layout.plan_remove_at(app.nvml, gpu0, 14, free).steps)
        assert [g.start for g in app.nvml.gpu_instances(0)] == [taken]
        assert layout.plan_remove_at(app.nvml, gpu0, 14, free).steps == []  # gone already: nothing to do
    finally:
        app.close()
