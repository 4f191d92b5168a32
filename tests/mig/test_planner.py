"""The planner is complete: it places every multiset that an exhaustive search can place.

For each GPU model, every multiset of GPU-instance profiles within the per-profile max counts is
checked against an independent brute-force search (plain backtracking in request order, no pruning
of symmetric choices), empty GPU and with instances already present.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from vgpukit.errors import NoCapacity
from vgpukit.mig.planner import GiPlacement, Occupant, future_largest, plan, search
from vgpukit.nvml import GiProfile
from vgpukit.nvml.table import model


def brute_force(profiles: Sequence[GiProfile], occupants: Sequence[Occupant], request: Sequence[GiProfile]) -> bool:
    """Try every placement of every request in the given order (memoised on the occupied cells)."""
    media0 = sum(1 for o in occupants if any(p.id == o.profile_id and p.media for p in profiles))
    used0 = frozenset(c for o in occupants for c in range(o.start, o.start + o.size))
    for p in set(request):
        if sum(1 for q in request if q == p) + sum(1 for o in occupants if o.profile_id == p.id) > p.max_count:
            return False

    @functools.cache
    def rec(i: int, used: frozenset[int], media: int) -> bool:
        if i == len(request):
            return True
        p = request[i]
        if p.media and media:
            return False
        for start in p.starts:
            cells = set(range(start, start + p.size))
            if not cells & used and rec(i + 1, used | cells, media + p.media):
                return True
        return False

    return rec(0, used0, media0)


def multisets(profiles: Sequence[GiProfile]) -> Iterator[list[GiProfile]]:
    ranges = [range(p.max_count + 1) for p in profiles]
    for counts in itertools.product(*ranges):
        yield [p for p, n in zip(profiles, counts, strict=True) for _ in range(n)]


def check_valid(
    profiles: Sequence[GiProfile],
    occupants: Sequence[Occupant],
    request: Sequence[GiProfile],
    placed: Sequence[GiPlacement],
) -> None:
    assert sorted(p.profile.id for p in placed) == sorted(p.id for p in request)
    cells: list[int] = [c for o in occupants for c in range(o.start, o.start + o.size)]
    for pl in placed:
        assert pl.start in pl.profile.starts
        cells.extend(pl.slots)
    assert len(cells) == len(set(cells))


@pytest.mark.parametrize("key", ["A100-SXM4-40GB", "H100-SXM5-80GB", "A30"])
def test_planner_matches_exhaustive_search_on_an_empty_gpu(key: str) -> None:
    profiles = model(key).profiles
    checked = fits = 0
    for request in multisets(profiles):
        expected = brute_force(profiles, [], request)
        got = search(profiles, [], request)
        assert (got is not None) == expected, [p.name for p in request]
        if got is not None:
            check_valid(profiles, [], request, got)
            fits += 1
        checked += 1
    assert checked == (3840 if key != "A30" else 5 * 2 * 3 * 2 * 2)
    assert fits > (10 if key == "A30" else 50)


@pytest.mark.parametrize("key", ["A100-SXM4-80GB", "H200-SXM5-141GB"])
def test_planner_matches_exhaustive_search_next_to_existing_instances(key: str) -> None:
    profiles = model(key).profiles
    rng = random.Random(7)
    layouts = set()
    for _ in range(40):
        occupants: list[Occupant] = []
        for p in rng.sample(list(profiles), len(profiles)):  # a random valid existing layout
            for s in p.starts:
                if (
                    rng.random() < 0.3
                    and brute_force(profiles, occupants, [p])
                    and not any(set(range(s, s + p.size)) & set(range(o.start, o.start + o.size)) for o in occupants)
                    and sum(o.profile_id == p.id for o in occupants) < p.max_count
                ):
                    if p.media and any(q.media and q.id == o.profile_id for o in occupants for q in profiles):
                        continue
                    occupants.append(Occupant(p.id, s, p.size, f"GI ({p.name})"))
        layouts.add(tuple(sorted((o.profile_id, o.start) for o in occupants)))
        for request in multisets(profiles):
            if sum(p.size for p in request) > 8:
                continue
            got = search(profiles, occupants, request)
            assert (got is not None) == brute_force(profiles, occupants, request)
            if got is not None:
                check_valid(profiles, occupants, request, got)
    assert len(layouts) > 20  # many distinct existing layouts were exercised


def best_future(profiles: Sequence[GiProfile], request: Sequence[GiProfile]) -> tuple[int, int]:
    """Exhaustively, the largest future profile any complete layout of ``request`` leaves placeable."""
    best = (-1, -1)
    for starts in itertools.product(*(p.starts for p in request)):
        occ = [Occupant(p.id, s, p.size, "") for p, s in zip(request, starts, strict=True)]
        cells = [c for o in occ for c in range(o.start, o.start + o.size)]
        if len(cells) != len(set(cells)) or not brute_force(profiles, [], request):
            continue
        if sum(p.media for p in request) > 1:
            continue
        f = future_largest(profiles, occ)
        best = max(best, (f.slices, f.size) if f else (0, 0))
    return best


def test_planner_keeps_the_largest_future_profile_placeable() -> None:
    profiles = model("A100-SXM4-40GB").profiles
    for request in multisets(profiles):
        if not 0 < len(request) <= 3:
            continue
        got = search(profiles, [], request)
        if got is None:
            continue
        occ = [Occupant(pl.profile.id, pl.start, pl.profile.size, "") for pl in got]
        f = future_largest(profiles, occ)
        assert ((f.slices, f.size) if f else (0, 0)) == best_future(profiles, request), [p.name for p in request]


def test_guide_example_and_fragmentation_choice() -> None:
    profiles = model("A100-SXM4-40GB").profiles
    by = {p.name: p for p in profiles}
    got = plan(profiles, [], [by["1g.5gb"], by["1g.5gb"], by["2g.10gb"], by["3g.20gb"]])
    assert sorted(p.profile.name for p in got) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
    assert next(p.start for p in got if p.profile.name == "3g.20gb") == 4  # 2g.10gb + 1g.5gb x2 share 0-3
    one = plan(profiles, [], [by["1g.5gb"]])
    assert one[0].start == 6  # leaves 4g.20gb (slots 0-3) and 2g.10gb at 4 placeable


def test_no_capacity_reasons_name_the_limit_and_the_slots() -> None:
    profiles = model("A100-SXM4-40GB").profiles
    by = {p.name: p for p in profiles}
    with pytest.raises(NoCapacity, match=r"at most 2 3g\.20gb"):
        plan(profiles, [], [by["3g.20gb"]] * 3)
    occ = [Occupant(by["1g.5gb"].id, 1, 1, "GI 8 (1g.5gb)"), Occupant(by["1g.5gb"].id, 5, 1, "GI 12 (1g.5gb)")]
    with pytest.raises(NoCapacity, match=r"slots 1 by GI 8 \(1g.5gb\); slots 5 by GI 12") as exc:
        plan(profiles, occ, [by["3g.20gb"]])
    assert "fit in no arrangement" in str(exc.value)
    with pytest.raises(NoCapacity, match="media engines"):
        plan(model("A30").profiles, [], [p for p in model("A30").profiles if p.media])


def test_planned_layouts_are_accepted_by_the_simulated_driver(tmp_path: Path) -> None:
    """The planner's model of the GPU agrees with the driver's: its placements create as planned."""
    from vgpukit.sim.nvml import SimNvml

    from .mig_helpers import enable_now, make_sim

    sim = make_sim(tmp_path / "s", ["H100-SXM5-80GB"])
    enable_now(sim, 0)
    n = SimNvml(sim)
    profiles = n.gi_profiles(0)
    fitting = [r for r in multisets(profiles) if r and search(profiles, [], r) is not None]
    for request in random.Random(3).sample(fitting, 40):
        placed = search(profiles, [], request)
        assert placed is not None
        for pl in placed:
            assert n.create_gpu_instance(0, pl.profile.id, pl.start).start == pl.start
        occupants = [Occupant(p.profile.id, p.start, p.profile.size, "") for p in placed]
        for p in profiles:  # the driver's remaining capacity agrees with what the planner can still place
            assert (n.remaining_capacity(0, p.id) > 0) == (search(profiles, occupants, [p]) is not None)
        for gi in n.gpu_instances(0):
            n.destroy_gpu_instance(0, gi.id)
