"""The mdev planner's convergence for host configs (``vgpukit apply``, ``vgpu`` sections): exactly the
wanted instances per type on a set of parents, and no definition left to bring back at boot what the
config does not have. Part of the one mdev planner (:mod:`vgpukit.mdev.planner`), kept here for size."""

from __future__ import annotations

from ..engine import Step
from ..errors import Conflict
from ..inputs import at
from .model import Definition, MdevInstance, planned_uuids
from .placement import candidates, plan
from .planner import BIG, Facts, Wants, in_use, type_of, undefine, wrapped
from .steps import CreateMdev, RemoveMdev


# ----------------------------------------------------------------------------- converge (apply)
def _keep(
    have: list[MdevInstance], pinned: tuple[str, ...], count: int, taken: set[str]
) -> tuple[list[MdevInstance], list[str]]:
    """Which instances stay (pinned, then in use, then by UUID) and which pinned UUIDs are missing.
    ``taken``: every UUID the request pins on these parents (one pinned as another type is not kept)."""
    mine = {i.uuid: i for i in have}
    kept = [mine[u] for u in pinned if u in mine]
    rest = sorted((i for i in have if i.uuid not in taken), key=lambda i: (not i.in_use, i.uuid))
    kept += rest[: max(0, count - len(pinned))]
    return kept, [u for u in pinned if u not in mine]


def converge(facts: Facts, parents: list[str], wants: Wants) -> tuple[list[Step], list[Step]]:
    """Exactly ``wants[type] = (count, pinned uuids)`` instances on ``parents`` (other types removed):
    the removal steps and the creation steps (each with their call-outs)."""
    objs = [facts.parent(p) for p in parents]
    on = [i for i in facts.instances if i.parent in parents]
    elsewhere = {i.uuid: i for i in facts.instances if i.parent not in parents}
    gone: list[MdevInstance] = []
    todo: list[tuple[str, list[str]]] = []
    taken = {u for _, pinned in wants.values() for u in pinned}
    for type_id, (count, pinned) in wants.items():
        if len(parents) == 1:
            type_of(facts, parents[0], type_id)
        else:
            candidates(objs, type_id)  # "no mdev parent offers type T" when none does
        for u in pinned:
            if u in elsewhere:
                raise at(Conflict(f"mdev {u} exists already on {elsewhere[u].parent}", value=u), "uuids")
        have = [i for i in on if i.type_id == type_id]
        kept, missing = _keep(have, pinned, count, taken)
        gone += [i for i in have if i not in kept]
        new = planned_uuids(
            parents, type_id, count - len(kept) - len(missing), {i.uuid for i in facts.instances} | taken
        )
        todo.append((type_id, missing + new))
    gone += [i for i in on if i.type_id not in wants]
    made: list[Definition] = []
    for type_id, uuids in todo:
        if not uuids:
            continue
        # removals free capacity the kernel shares between types in ways only it knows: a parent losing
        # instances is not checked here (each creation checks, and a failure rolls the whole run back)
        freeing = {i.parent for i in gone}
        cands = [(p, BIG if p in freeing else a) for p, a in candidates(objs, type_id)]
        slots = [s.parent for s in plan(cands, type_id, len(uuids)) for _ in range(s.count)]
        made += [Definition(u, p, type_id) for p, u in zip(slots, uuids, strict=True)]
    busy = [i for i in gone if i.in_use or facts.domains.get(i.uuid)]
    if busy:
        raise in_use(busy[0], facts.domains.get(busy[0].uuid, ()))
    gone.sort(key=lambda i: i.uuid)
    stopped = [Definition(i.uuid, i.parent, i.type_id) for i in gone]
    removals = wrapped(facts, "stop", stopped, [RemoveMdev(d.uuid, d.parent, d.type_id) for d in stopped])
    removals += _stale_definitions(facts, parents, {i.uuid for i in gone}, {i.uuid for i in on} | taken)
    adds = wrapped(facts, "start", made, [CreateMdev(d.parent, d.type_id, d.uuid) for d in made])
    return removals, adds


def _stale_definitions(facts: Facts, parents: list[str], gone: set[str], here: set[str]) -> list[Step]:
    """The definitions that would bring back at boot what the request does not have: those of the
    instances it removes (as ``vgpu remove`` does), and the ``auto`` ones of devices that are not
    running (``here``: running or pinned UUIDs) on its parents."""
    stale = [d for d in facts.definitions if d.parent in parents and (d.uuid in gone or d.uuid not in here)]
    steps: list[Step] = []
    for d in sorted((d for d in stale if d.uuid in gone or d.start == "auto"), key=lambda d: d.uuid):
        steps += undefine(facts, d.uuid, [facts.path(d)], d.parent).steps
    return steps
