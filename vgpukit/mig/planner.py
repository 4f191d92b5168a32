"""The MIG placement planner: explicit placements for a multiset of GPU-instance profiles.

Pure (no I/O). Given the profiles of a GPU (as the driver reports them), the GPU instances that
stay, and the requested profiles, :func:`plan` returns a placement for every request whenever one
exists (a complete search over the few placements a GPU has, with symmetric choices pruned), and of
all complete layouts picks the one that

1. keeps the largest possible future profile placeable (most compute slices, then memory slots),
2. then keeps the most (profile, placement) pairs open (least fragmentation),
3. then puts single-slot instances high and larger ones low (deterministic tie-break).

When nothing fits it raises :class:`NoCapacity` saying why: which limit is exceeded, or which memory
slots are taken by what; a request no layout of the *empty* GPU holds is :class:`NeverFits` (bad input,
exit 2), whatever the GPU holds now.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec

from ..errors import InvalidInput, NoCapacity
from ..nvml import GiProfile


class Occupant(msgspec.Struct, frozen=True):
    """A GPU instance that stays where it is."""

    profile_id: int
    start: int
    size: int
    label: str  # "GI 3 (2g.10gb)"


class GiPlacement(msgspec.Struct, frozen=True):
    profile: GiProfile
    start: int

    @property
    def slots(self) -> range:
        return range(self.start, self.start + self.profile.size)


def memory_slots(profiles: Sequence[GiProfile]) -> int:
    return max((s + p.size for p in profiles for s in p.starts), default=0)


def _mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


class _State:
    __slots__ = ("counts", "media", "used")

    def __init__(self, used: int, counts: Counter[int], media: int) -> None:
        self.used = used
        self.counts = counts
        self.media = media


def _can_place(p: GiProfile, start: int, st: _State) -> bool:
    return not st.used & _mask(start, p.size) and st.counts[p.id] < p.max_count and not (p.media and st.media)


def _score(profiles: Sequence[GiProfile], st: _State, chosen: Sequence[GiPlacement]) -> tuple[int, int, int, int]:
    best = (0, 0)
    open_pairs = 0
    for p in profiles:
        for s in p.starts:
            if _can_place(p, s, st):
                open_pairs += 1
                best = max(best, (p.slices, p.size))
    # tie-break: single-slot instances high, larger ones low (the driver's habit; keeps free space together)
    packing = sum(c.start if c.profile.size == 1 else -c.start * c.profile.size for c in chosen)
    return best[0], best[1], open_pairs, packing


def future_largest(profiles: Sequence[GiProfile], occupants: Sequence[Occupant]) -> GiProfile | None:
    """The largest profile that could still be created next to ``occupants``."""
    st = _initial(profiles, occupants)
    fits = [p for p in profiles if any(_can_place(p, s, st) for s in p.starts)]
    return max(fits, key=lambda p: (p.slices, p.size), default=None)


def _initial(profiles: Sequence[GiProfile], occupants: Sequence[Occupant]) -> _State:
    by_id = {p.id: p for p in profiles}
    used, counts, media = 0, Counter[int](), 0
    for o in occupants:
        used |= _mask(o.start, o.size)
        counts[o.profile_id] += 1
        if (p := by_id.get(o.profile_id)) is not None and p.media:
            media += 1
    return _State(used, counts, media)


def search(
    profiles: Sequence[GiProfile], occupants: Sequence[Occupant], request: Sequence[GiProfile]
) -> list[GiPlacement] | None:
    """The best complete layout for ``request`` next to ``occupants``, or None when none exists."""
    st = _initial(profiles, occupants)
    items = sorted(request, key=lambda p: (-p.size, len(p.starts), p.id))
    best: tuple[tuple[int, int, int, int], list[GiPlacement]] | None = None
    chosen: list[GiPlacement] = []

    def rec(i: int) -> None:
        nonlocal best
        if i == len(items):
            score = _score(profiles, st, chosen)
            if best is None or score > best[0]:
                best = (score, list(chosen))
            return
        p = items[i]
        # identical requests are interchangeable: place them in increasing start order only
        low = chosen[-1].start + 1 if i and items[i - 1].id == p.id else -1
        for s in p.starts:
            if s < low or not _can_place(p, s, st):
                continue
            st.used |= _mask(s, p.size)
            st.counts[p.id] += 1
            st.media += p.media
            chosen.append(GiPlacement(p, s))
            rec(i + 1)
            chosen.pop()
            st.media -= p.media
            st.counts[p.id] -= 1
            st.used &= ~_mask(s, p.size)

    rec(0)
    if best is None:
        return None
    return sorted(best[1], key=lambda c: c.start)


class NeverFits(InvalidInput):
    """The request fits no layout of the GPU even with every instance gone: invalid input, not busy."""


def never_fits(profiles: Sequence[GiProfile], request: Sequence[GiProfile]) -> str | None:
    """Why ``request`` fits no layout of the empty GPU (its totals over the GPU's), or None when it fits one."""
    if not request or search(profiles, [], request) is not None:
        return None
    names = ", ".join(p.name for p in sorted(request, key=lambda p: (-p.size, p.name)))
    slices = max((p.slices for p in profiles), default=0)
    need_slices = sum(p.slices for p in request)
    slots = memory_slots(profiles)
    need_slots = sum(p.size for p in request)
    totals = f"{need_slices} of {slices} compute slices, {need_slots} of {slots} memory slots"
    if need_slices <= slices and need_slots <= slots:
        return f"{names} can never fit, even on the empty GPU: {why_not(profiles, [], request)} ({totals})"
    return f"{names} can never fit, even on the empty GPU: {totals}"


def plan(
    profiles: Sequence[GiProfile], occupants: Sequence[Occupant], request: Sequence[GiProfile]
) -> list[GiPlacement]:
    """Placements for ``request``; raises :class:`NoCapacity` with the reason when it cannot fit."""
    found = search(profiles, occupants, request)
    if found is None:
        raise NoCapacity(why_not(profiles, occupants, request))
    return found


def why_not(profiles: Sequence[GiProfile], occupants: Sequence[Occupant], request: Sequence[GiProfile]) -> str:
    """One line saying why ``request`` cannot be placed next to ``occupants``."""
    by_id = {p.id: p for p in profiles}
    have = Counter(o.profile_id for o in occupants)
    want = Counter(p.id for p in request)
    for pid, n in sorted(want.items()):
        p = by_id[pid]
        if n + have[pid] > p.max_count:
            extra = f" ({have[pid]} exist)" if have[pid] else ""
            return f"{n} x {p.name} requested{extra} but a GPU holds at most {p.max_count} {p.name}"
    media = sum(n for pid, n in want.items() if by_id[pid].media)
    media_have = sum(n for pid, n in have.items() if pid in by_id and by_id[pid].media)
    if media + media_have > 1:
        return "only one GPU instance per GPU can own the media engines (+me profiles)"
    slots = memory_slots(profiles)
    need = sum(p.size for p in request)
    taken = sorted(occupants, key=lambda o: o.start)
    where = "; ".join(f"slots {_span(o.start, o.size)} by {o.label}" for o in taken) or "none taken"
    free = slots - sum(o.size for o in occupants)
    names = ", ".join(p.name for p in sorted(request, key=lambda p: -p.size))
    if need > free:
        return f"{names}: {need} of {slots} memory slots needed, {free} free ({where})"
    return f"{names} fit in no arrangement of the {free} free memory slots ({where})"


def _span(start: int, size: int) -> str:
    return str(start) if size == 1 else f"{start}-{start + size - 1}"


def open_placements(profiles: Sequence[GiProfile], occupants: Sequence[Occupant]) -> list[GiPlacement]:
    """Every (profile, start) a GPU instance could still be created at next to ``occupants``, alone."""
    st = _initial(profiles, occupants)
    return [GiPlacement(p, s) for p in profiles for s in p.starts if _can_place(p, s, st)]


def why_not_at(
    profiles: Sequence[GiProfile], occupants: Sequence[Occupant], profile: GiProfile, start: int
) -> str | None:
    """Why a GPU instance of ``profile`` cannot be created at exactly ``start`` next to ``occupants``
    (None when it can): a start the profile has no placement at, slots taken, the profile's count, the
    media engines."""
    if start not in profile.starts:
        where = ", ".join(str(s) for s in profile.starts) or "none"
        return f"{profile.name} has no placement at slot {start} (its placements start at {where})"
    st = _initial(profiles, occupants)
    if _can_place(profile, start, st):
        return None
    taken = [o for o in occupants if _mask(o.start, o.size) & _mask(start, profile.size)]
    if taken:
        by = "; ".join(f"slots {_span(o.start, o.size)} by {o.label}" for o in sorted(taken, key=lambda o: o.start))
        return f"{profile.name} at slots {_span(start, profile.size)}: taken ({by})"
    return why_not(profiles, occupants, [profile])


def most_in_a_layout(profiles: Sequence[GiProfile], value: str) -> int:
    """The largest sum of a profile field (``memory_mib``, ``sms``, ``slices``) over GPU instances at
    non-overlapping placements of the empty GPU: no set of co-existing instances exceeds it (per-profile
    counts and the media engines, which only lower a layout's sum, aside)."""
    slots = memory_slots(profiles)
    best = [0] * (slots + 2)
    for slot in range(slots - 1, -1, -1):
        best[slot] = best[slot + 1]
        for p in profiles:
            if slot in p.starts and slot + p.size <= slots:
                best[slot] = max(best[slot], int(getattr(p, value)) + best[slot + p.size])
    return best[0]
