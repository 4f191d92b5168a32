"""One GPU's MIG layout change, planned (was ``mig/engine.py``: renamed, the change engine is
:mod:`vgpukit.engine`).

The MIG planners, bottom up: :mod:`vgpukit.mig.planner` places GPU instances (pure search);
this module turns one GPU's wanted layout into steps; :mod:`vgpukit.mig.migparted` is the planner
front ends call for a mig-parted config (``mig apply``/``assert``, ``vgpukit apply``).

:func:`plan_gpu` turns a desired state (:class:`GpuRequest`) and what the driver reports into an
ordered list of steps (:mod:`vgpukit.mig.steps`, one engine step per action), raising before anything
is touched when the request cannot be carried out (no capacity, busy instances, a mode change that
needs a reset not allowed). The change engine (:func:`vgpukit.engine.execute`) runs the plans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import Busy, Conflict, DeviceUnusable, NoCapacity, Unsupported
from ..exclusion import LOST, refusal
from ..nvml import GiProfile, GpuInstance, Nvml, NvmlGpu
from ..nvml import table as tables
from . import planner
from .spec import WantGi
from .steps import CreateCi, CreateGi, DestroyCi, DestroyGi, MigStep, Reset, SetMode


@dataclass
class GpuRequest:
    gpu: NvmlGpu
    mig: bool  # desired MIG mode
    gis: list[WantGi] = field(default_factory=list)
    exact: bool = False  # destroy idle GPU instances the request does not list
    label: str | None = None  # how messages name the GPU ("gpu0 (0000:03:00.0)"); default from NVML
    unusable: str | None = None  # the health fact: why the health layer finds the GPU unusable (None: usable)


@dataclass
class GpuPlan:
    gpu: NvmlGpu
    steps: list[MigStep]
    keep: list[GpuInstance]
    note: str = ""  # what the plan leaves undone on purpose, and why (a mode change not made)


def _label(gpu: NvmlGpu) -> str:
    return f"gpu{gpu.index} ({gpu.bdf})" if gpu.index >= 0 else gpu.bdf


def needs_reset(gpu: NvmlGpu) -> bool:
    """Whether a MIG mode change on this GPU waits for a reset (Ampere), per the profile tables."""
    for m in tables.models().values():
        if gpu.name in m.product_names:
            return m.reset_required
    return not any(tag in gpu.name for tag in ("H100", "H200", "H20", "B200", "GH200"))


def toggles_without_reset(gpu: NvmlGpu) -> bool:
    """Whether the profile tables say this GPU's model changes MIG mode without a reset (Hopper and
    newer: ``mig_mode_without_reset``); False for a model they do not know (never assumed)."""
    return any(gpu.name in m.product_names and m.without_reset for m in tables.models().values())


def _holders(nvml: Nvml, gpu: NvmlGpu, gi_id: int | None = None) -> str:
    procs = [p for p in nvml.processes(gpu.index) if gi_id is None or p.gi_id == gi_id]
    return ", ".join(p.describe() for p in procs)


def _sig(gi: GpuInstance) -> tuple[int, ...]:
    return tuple(sorted((c.slices for c in gi.compute_instances), reverse=True))


def _match(existing: list[GpuInstance], wants: list[WantGi]) -> tuple[list[tuple[WantGi, GpuInstance]], list[WantGi]]:
    """Pair wanted GPU instances with existing ones of the same profile.

    Passes, each over all wants: the same compute layout; then (a non-strict want, i.e. no --ci for
    its profile) any compute layout; then a GPU instance without compute instances (they are added).
    """
    free = list(existing)
    paired: dict[int, GpuInstance] = {}
    passes = (
        lambda w, g: _sig(g) == w.cis,
        lambda w, g: not w.strict and bool(g.compute_instances),
        lambda w, g: not g.compute_instances,
    )
    for accept in passes:
        for k, w in enumerate(wants):
            if k in paired:
                continue
            gi = next((g for g in free if g.profile_id == w.profile.id and accept(w, g)), None)
            if gi is not None:
                free.remove(gi)
                paired[k] = gi
    pairs = [(w, paired[k]) for k, w in enumerate(wants) if k in paired]
    return pairs, [w for k, w in enumerate(wants) if k not in paired]


Unusable = DeviceUnusable  # the health rule's refusal


def refuse_unusable(gpu: NvmlGpu, label: str | None, health: Mapping[str, str] | None) -> None:
    """The health rule: nothing is planned onto a GPU the health layer finds unusable (``health``:
    BDF -> why, :func:`vgpukit.health.fact.unusable`). Checked before any NVML call on the GPU (a lost
    GPU answers none)."""
    why = (health or {}).get(gpu.bdf)
    if why is None and gpu.lost:  # NVML says so before the health layer looked
        why = LOST
    if why is not None:
        raise refusal(label or _label(gpu), gpu.bdf, why)


def _usable_mig_gpu(req: GpuRequest | GiAtRequest) -> str:
    """The GPU's label, or the refusal every MIG plan starts with: unusable (health), not MIG-capable."""
    gpu = req.gpu
    label = req.label or _label(gpu)
    refuse_unusable(gpu, label, {gpu.bdf: req.unusable} if req.unusable else None)
    if not gpu.mig_capable:
        raise Unsupported(f"{label} ({gpu.name}) is not MIG-capable", device=gpu.bdf)
    return label


def plan_gpu(nvml: Nvml, req: GpuRequest, allow_reset: bool, skip_reset: bool = False) -> GpuPlan:
    """``skip_reset``: a mode change that needs a reset is made and left pending (mig-parted --skip-reset)."""
    gpu, label = req.gpu, _usable_mig_gpu(req)
    current, pending = nvml.mig_mode(gpu.index)
    steps: list[MigStep] = []
    profiles = nvml.gi_profiles(gpu.index)
    by_id = {p.id: p for p in profiles}
    existing = nvml.gpu_instances(gpu.index) if current else []
    busy = {p.gi_id for p in nvml.processes(gpu.index) if p.gi_id is not None}

    if not req.mig:
        if existing and not req.exact:
            raise Conflict(
                f"{label} still has {len(existing)} GPU instance(s)",
                device=gpu.bdf,
                hint=f"destroy them first: vgpukit mig destroy gpu{gpu.index} --all",
            )
        steps += destroy_steps(nvml, gpu, existing, busy, by_id, label)
        if current or pending:
            steps += _mode_steps(nvml, gpu, False, current, pending, allow_reset, label, skip_reset)
        return GpuPlan(gpu, steps, [])

    pairs, missing = _match(existing, req.gis)
    keep = [gi for _, gi in pairs]
    extra = [gi for gi in existing if gi not in keep]
    drop = [gi for gi in extra if req.exact]
    stay = [gi for gi in extra if not req.exact]
    occupants = [planner.Occupant(g.profile_id, g.start, g.size, _gi_label(g, by_id)) for g in keep + stay]
    wants_to_place = [w for w in missing]
    placed = planner.search(profiles, occupants, [w.profile for w in wants_to_place])
    if placed is None and req.exact:
        # repack: idle instances that match may be recreated elsewhere to make everything fit
        movable = [g for g in keep if g.id not in busy]
        fixed = [g for g in keep if g.id in busy]
        occ2 = [planner.Occupant(g.profile_id, g.start, g.size, _gi_label(g, by_id)) for g in fixed]
        moved_wants = [w for w, g in pairs if g in movable]
        placed = planner.search(profiles, occ2, [w.profile for w in wants_to_place + moved_wants])
        if placed is not None:
            drop += movable
            keep = fixed
            wants_to_place += moved_wants
            occupants = occ2
    if placed is None:
        never = planner.never_fits(profiles, [w.profile for w in req.gis])
        if never is not None:
            raise planner.NeverFits(f"{label}: {never}", device=gpu.bdf)
        reason = planner.why_not(profiles, occupants, [w.profile for w in wants_to_place])
        hint = None if req.exact or not stay else "--replace destroys idle instances the request does not list"
        raise NoCapacity(f"{label}: cannot place the request: {reason}", device=gpu.bdf, hint=hint)

    steps += destroy_steps(nvml, gpu, drop, busy, by_id, label)
    if not current or not pending:
        steps += _mode_steps(nvml, gpu, True, current, pending, allow_reset, label, skip_reset)
    # pair each placement with a wanted instance of its profile (compute layouts may differ)
    todo = list(wants_to_place)
    for pl in placed:
        w = next(x for x in todo if x.profile.id == pl.profile.id)
        todo.remove(w)
        steps.append(CreateGi(gpu.bdf, label, pl.profile.id, pl.profile.name, pl.start, pl.profile.size))
        steps += _ci_steps(gpu, label, pl.profile, pl.start, w.cis)
    for w, gi in pairs:
        if gi in keep and not gi.compute_instances:
            steps += _ci_steps(gpu, label, by_id[gi.profile_id], gi.start, w.cis)
    return GpuPlan(gpu, steps, keep)


def _ci_steps(gpu: NvmlGpu, label: str, p: GiProfile, start: int, cis: Sequence[int]) -> list[MigStep]:
    return [CreateCi(gpu.bdf, label, p.id, start, c, p.name if c == p.slices else f"{c}c.{p.name}") for c in cis]


def _gi_label(gi: GpuInstance, by_id: dict[int, GiProfile]) -> str:
    p = by_id.get(gi.profile_id)
    return f"GI {gi.id} ({p.name if p else gi.profile_id})"


def destroy_steps(
    nvml: Nvml,
    gpu: NvmlGpu,
    victims: Sequence[GpuInstance],
    busy: set[int],
    by_id: dict[int, GiProfile],
    label: str | None = None,
) -> list[MigStep]:
    held = [g for g in victims if g.id in busy]
    if held:
        who = "; ".join(f"{_gi_label(g, by_id)} is used by {_holders(nvml, gpu, g.id)}" for g in held)
        raise Busy(f"{label or _label(gpu)}: {who}", device=gpu.bdf, hint="stop those processes first")
    label = label or _label(gpu)
    steps: list[MigStep] = []
    for gi in victims:
        for ci in gi.compute_instances:
            steps.append(DestroyCi(gpu.bdf, label, gi.profile_id, gi.start, ci.start, ci.slices, gi.id, ci.id, ci.uuid))
        name = by_id[gi.profile_id].name if gi.profile_id in by_id else str(gi.profile_id)
        steps.append(DestroyGi(gpu.bdf, label, gi.profile_id, name, gi.start, gi.size, gi.id))
    return steps


class ResetRequired(Conflict):
    """A MIG mode change needs a GPU reset and resetting was not allowed (--no-reset)."""


class ResetBlocked(Busy):
    """A MIG mode change needs a GPU reset and processes hold the GPU."""


def _mode_steps(
    nvml: Nvml,
    gpu: NvmlGpu,
    enable: bool,
    current: bool,
    pending: bool,
    allow_reset: bool,
    label: str,
    skip_reset: bool = False,
) -> list[MigStep]:
    word = "enable" if enable else "disable"
    reset = current != enable and needs_reset(gpu)
    steps: list[MigStep] = []
    if reset and skip_reset:
        return [SetMode(gpu.bdf, label, enable, pending_ok=True)] if pending != enable else []
    if pending != enable:
        steps.append(SetMode(gpu.bdf, label, enable, then_reset=reset))
    if reset:
        if not allow_reset:
            raise ResetRequired(
                f"{label}: to {word} MIG, {gpu.name} needs a GPU reset (the change stays pending until then)",
                device=gpu.bdf,
                hint="rerun without --no-reset, or reset the GPU yourself (nvidia-smi -r) and rerun",
            )
        holders = _holders(nvml, gpu)
        if holders:
            raise ResetBlocked(
                f"{label}: cannot reset, the GPU is held by {holders}",
                device=gpu.bdf,
                hint="stop them (e.g. systemctl stop nvidia-persistenced) and rerun",
            )
        steps.append(Reset(gpu.bdf, label, enable))
    return steps


@dataclass
class GiAtRequest:
    """One GPU instance (with its default, full-size compute instance) at exactly ``start``: a placement
    someone else chose (the Kubernetes scheduler, for a made-on-demand DRA device)."""

    gpu: NvmlGpu
    profile_id: int
    start: int
    label: str | None = None
    unusable: str | None = None  # the health fact (None: usable)
    ours: bool = False  # a GPU instance of that profile at that start already is the requester's: keep it
    turn_on: bool = False  # MIG mode may be turned on for it, where that needs no GPU reset


def _mode_on(nvml: Nvml, gpu: NvmlGpu, label: str, turn_on: bool) -> list[MigStep]:
    """The step turning MIG mode on for a placement, or the refusal: not asked, a reset needed (never done
    for a placement someone else chose: a pod may be using the GPU), the GPU held."""
    if not turn_on:
        raise Conflict(
            f"{label}: MIG mode is off", device=gpu.bdf, hint=f"vgpukit mig apply or partition gpu{gpu.index}"
        )
    if not toggles_without_reset(gpu):
        raise ResetRequired(
            f"{label}: MIG mode is off, and turning it on needs a GPU reset on {gpu.name}",
            device=gpu.bdf,
            hint=f"turn it on yourself when the GPU is idle: vgpukit mig apply or partition gpu{gpu.index}",
        )
    holders = _holders(nvml, gpu)
    if holders:
        raise ResetBlocked(f"{label}: cannot turn MIG mode on, the GPU is held by {holders}", device=gpu.bdf)
    return [SetMode(gpu.bdf, label, True)]


def plan_gi_at(nvml: Nvml, req: GiAtRequest) -> GpuPlan:
    """The steps creating the GPU instance and its default compute instance at the fixed placement,
    or the refusal: not in MIG mode (unless ``turn_on`` on a GPU that changes mode without a reset: the
    mode change is the first step), an unknown profile, a placement the profile does not have, slots
    taken, busy. Ensures (a GI already there, when ``ours``, keeps; its compute instance is added when
    missing)."""
    gpu, label = req.gpu, _usable_mig_gpu(req)
    current, _pending = nvml.mig_mode(gpu.index)
    first = [] if current else _mode_on(nvml, gpu, label, req.turn_on)
    profiles = nvml.gi_profiles(gpu.index)
    by_id = {p.id: p for p in profiles}
    prof = by_id.get(req.profile_id)
    if prof is None:
        raise planner.NeverFits(f"{label} has no MIG profile {req.profile_id}", device=gpu.bdf)
    existing = nvml.gpu_instances(gpu.index) if current else []
    mine = next((g for g in existing if g.profile_id == prof.id and g.start == req.start), None)
    if mine is not None and req.ours:
        full = CreateCi(gpu.bdf, label, prof.id, req.start, prof.slices, prof.name, 0)
        return GpuPlan(gpu, [] if mine.compute_instances else [full], [mine])
    occupants = [planner.Occupant(g.profile_id, g.start, g.size, _gi_label(g, by_id)) for g in existing]
    why = planner.why_not_at(profiles, occupants, prof, req.start)
    if why is not None:
        cls = planner.NeverFits if req.start not in prof.starts else NoCapacity
        raise cls(f"{label}: {why}", device=gpu.bdf)
    steps: list[MigStep] = [*first, CreateGi(gpu.bdf, label, prof.id, prof.name, req.start, prof.size)]
    steps.append(CreateCi(gpu.bdf, label, prof.id, req.start, prof.slices, prof.name, 0))  # full size: slice 0
    return GpuPlan(gpu, steps, [])


def plan_remove_at(nvml: Nvml, gpu: NvmlGpu, profile_id: int, start: int, label: str | None = None) -> GpuPlan:
    """The steps destroying the GPU instance of ``profile_id`` at ``start`` (and its compute instances);
    :class:`Busy` while processes use it; no steps when it is gone already."""
    current, _ = nvml.mig_mode(gpu.index)
    existing = nvml.gpu_instances(gpu.index) if current else []
    victims = [g for g in existing if g.profile_id == profile_id and g.start == start]
    by_id = {p.id: p for p in nvml.gi_profiles(gpu.index)} if victims else {}
    busy = {p.gi_id for p in nvml.processes(gpu.index) if p.gi_id is not None} if victims else set()
    return GpuPlan(gpu, destroy_steps(nvml, gpu, victims, busy, by_id, label), [])


def plan_release(
    nvml: Nvml, gpu: NvmlGpu, placements: list[tuple[int, int]], turn_off: bool, label: str | None = None
) -> GpuPlan:
    """The steps destroying the GPU instances at ``placements`` ((profile id, start); :class:`Busy` while
    processes use one), then, with ``turn_off``, turning MIG mode off when no other GPU instance is left on
    a GPU that changes mode without a reset. Nothing holding the GPU is stopped for it: held, the mode
    stays on and ``note`` says why (a later release or a prepare of the whole GPU turns it off)."""
    label = label or _label(gpu)
    current, _ = nvml.mig_mode(gpu.index)
    existing = nvml.gpu_instances(gpu.index) if current else []
    victims = [g for g in existing if (g.profile_id, g.start) in set(placements)]
    by_id = {p.id: p for p in nvml.gi_profiles(gpu.index)} if victims else {}
    busy = {p.gi_id for p in nvml.processes(gpu.index) if p.gi_id is not None} if victims else set()
    plan = GpuPlan(gpu, destroy_steps(nvml, gpu, victims, busy, by_id, label), [])
    if not (turn_off and current) or len(victims) < len(existing) or not toggles_without_reset(gpu):
        return plan
    holders = ", ".join(p.describe() for p in nvml.processes(gpu.index) if p.gi_id is None)
    if holders:
        plan.note = f"{label}: MIG mode left on, the GPU is held by {holders}"
        return plan
    plan.steps.append(SetMode(gpu.bdf, label, False))
    return plan
