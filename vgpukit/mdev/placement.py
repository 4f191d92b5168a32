"""Choosing parents for N new instances of one type (pure: no I/O)."""

from __future__ import annotations

import msgspec

from ..errors import InvalidInput, NoCapacity, NotFound
from ..inputs import at
from .model import PACK, SPREAD, MdevParent, short_name


class Slot(msgspec.Struct, frozen=True):
    parent: str
    count: int


def candidates(parents: list[MdevParent], type_id: str, numa: int | None = None) -> list[tuple[str, int]]:
    """(parent, available_instances) of every parent offering ``type_id`` (on NUMA node ``numa``)."""
    offering = [p for p in parents if p.type(type_id) is not None]
    if not offering:
        raise at(
            NotFound(f"no mdev parent offers type {type_id}", value=type_id, hint="see: vgpukit mdev types"), "type"
        )
    if numa is not None:
        offering = [p for p in offering if p.numa_node == numa]
        if not offering:
            raise NotFound(f"no parent offering {type_id} is on NUMA node {numa}", value=numa)
    return [(p.name, p.type(type_id).available) for p in offering]  # type: ignore[union-attr]


def plan(cands: list[tuple[str, int]], type_id: str, count: int, strategy: str = PACK) -> list[Slot]:
    """How many instances go on which parent; NoCapacity when the whole request does not fit.

    ``pack`` fills the fullest parents first (fewest available, then name) so whole parents stay free;
    ``spread`` puts each next instance on the parent with the most room left.
    """
    total = sum(a for _, a in cands)
    if total < count:
        detail = ", ".join(f"{p}: {a}" for p, a in cands)
        raise at(
            NoCapacity(
                f"{count} x {type_id} do not fit: {total} available in total ({detail})",
                value=count,
                hint="nothing was created",
            ),
            "count",
        )
    if strategy == SPREAD:
        left = dict(cands)
        got: dict[str, int] = {}
        for _ in range(count):
            best = min(left, key=lambda p: (-left[p], p))
            left[best] -= 1
            got[best] = got.get(best, 0) + 1
        return [Slot(p, n) for p, n in sorted(got.items())]
    out = []
    need = count
    for parent, avail in sorted(cands, key=lambda c: (c[1], c[0])):
        if need == 0:
            break
        take = min(avail, need)
        if take:
            out.append(Slot(parent, take))
            need -= take
    return out


def type_named(known: tuple[MdevParent, ...] | list[MdevParent], wanted: str, parents: list[str] | None = None) -> str:
    """The type id ``wanted`` names on ``parents`` (all present parents when None): a type id as it is,
    or a type's name as its parent reports it (``GRID T4-4Q``, ``T4-4Q``, any case, the vendor's
    prefix word optional: the names ``mdev types`` and ``vgpu types`` show). Refused when the name is
    two types'; anything else is returned as given (the type rules then refuse it by id)."""
    present = [p for p in known if parents is None or p.name in parents]
    if any(p.type(wanted) is not None for p in present) or not wanted.strip():
        return wanted
    key = short_name(wanted)
    ids = sorted({t.type_id for p in present for t in p.types if t.name and short_name(t.name) == key})
    if len(ids) > 1:
        raise InvalidInput(
            f"the type name given is the name of {len(ids)} types ({', '.join(ids)})",
            value=wanted,
            hint="give the type id",
        )
    return ids[0] if ids else wanted
