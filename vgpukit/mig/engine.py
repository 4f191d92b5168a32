"""Plan, apply, verify and roll back MIG changes on one or more GPUs.

:func:`plan_gpu` turns a desired state (:class:`GpuRequest`) and what the driver reports into an
ordered list of :class:`Step` s, raising before anything is touched when the request cannot be
carried out (no capacity, busy instances, a mode change that needs a reset not allowed).
:func:`apply` runs the steps and, when one fails, undoes what this run did in reverse order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from ..errors import Busy, Conflict, NoCapacity, Unsupported, VgpukitError
from ..nvml import GiProfile, GpuInstance, Nvml, NvmlGpu
from ..nvml import table as tables
from . import planner
from .spec import WantGi, ci_enum


@dataclass
class GpuRequest:
    gpu: NvmlGpu
    mig: bool  # desired MIG mode
    gis: list[WantGi] = field(default_factory=list)
    exact: bool = False  # destroy idle GPU instances the request does not list
    label: str | None = None  # how messages name the GPU ("gpu0 (0000:03:00.0)"); default from NVML


@dataclass
class Step:
    action: str  # destroy-ci | destroy-gi | set-mode | reset | create-gi | create-ci
    gpu: NvmlGpu
    text: str
    profile: GiProfile | None = None
    start: int | None = None
    gi_id: int | None = None
    ci_slices: int | None = None
    ci_id: int | None = None
    enable: bool = False
    ref: int | None = None  # create-ci of a GI created by this plan: index of its create-gi step
    gi_record: GpuInstance | None = None  # destroy-gi: what to recreate on rollback
    pending_ok: bool = False  # set-mode: a change left pending until the next reset is the intent
    label: str = ""

    def describe(self) -> str:
        return f"{self.label or _label(self.gpu)}: {self.text}"


@dataclass
class GpuPlan:
    gpu: NvmlGpu
    steps: list[Step]
    keep: list[GpuInstance]


def _label(gpu: NvmlGpu) -> str:
    return f"gpu{gpu.index} ({gpu.bdf})" if gpu.index >= 0 else gpu.bdf


def needs_reset(gpu: NvmlGpu) -> bool:
    """Whether a MIG mode change on this GPU waits for a reset (Ampere), per the profile tables."""
    for m in tables.models().values():
        if gpu.name in m.product_names:
            return m.reset_required
    return not any(tag in gpu.name for tag in ("H100", "H200", "H20", "B200", "GH200"))


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


def plan_gpu(nvml: Nvml, req: GpuRequest, allow_reset: bool) -> GpuPlan:
    gpu = req.gpu
    label = req.label or _label(gpu)
    if not gpu.mig_capable:
        raise Unsupported(f"{label} ({gpu.name}) is not MIG-capable", device=gpu.bdf)
    current, pending = nvml.mig_mode(gpu.index)
    steps: list[Step] = []
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
        steps += _destroy_steps(nvml, gpu, existing, busy, by_id, label)
        if current or pending:
            steps += _mode_steps(nvml, gpu, False, current, pending, allow_reset, label)
        return GpuPlan(gpu, _labelled(steps, label), [])

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
        reason = planner.why_not(profiles, occupants, [w.profile for w in wants_to_place])
        hint = None if req.exact or not stay else "--replace destroys idle instances the request does not list"
        raise NoCapacity(f"{label}: cannot place the request: {reason}", device=gpu.bdf, hint=hint)

    steps += _destroy_steps(nvml, gpu, drop, busy, by_id, label)
    if not current or not pending:
        steps += _mode_steps(nvml, gpu, True, current, pending, allow_reset, label)
    # pair each placement with a wanted instance of its profile (compute layouts may differ)
    todo = list(wants_to_place)
    for pl in placed:
        w = next(x for x in todo if x.profile.id == pl.profile.id)
        todo.remove(w)
        steps.append(
            Step(
                "create-gi",
                gpu,
                f"create GPU instance {pl.profile.name} at slots {_span(pl)}",
                profile=pl.profile,
                start=pl.start,
            )
        )
        ref = len(steps) - 1
        for c in w.cis:
            name = pl.profile.name if c == pl.profile.slices else f"{c}c.{pl.profile.name}"
            steps.append(Step("create-ci", gpu, f"create compute instance {name} in it", ci_slices=c, ref=ref))
    for w, gi in pairs:
        if gi in keep and not gi.compute_instances:
            for c in w.cis:
                steps.append(
                    Step(
                        "create-ci",
                        gpu,
                        f"create compute instance {c}c in GPU instance {gi.id}",
                        gi_id=gi.id,
                        ci_slices=c,
                    )
                )
    return GpuPlan(gpu, _labelled(steps, label), keep)


def _labelled(steps: list[Step], label: str) -> list[Step]:
    for step in steps:
        step.label = label
    return steps


def _span(pl: planner.Placement) -> str:
    return f"{pl.start}-{pl.start + pl.profile.size - 1}" if pl.profile.size > 1 else str(pl.start)


def _gi_label(gi: GpuInstance, by_id: dict[int, GiProfile]) -> str:
    p = by_id.get(gi.profile_id)
    return f"GI {gi.id} ({p.name if p else gi.profile_id})"


def _destroy_steps(
    nvml: Nvml,
    gpu: NvmlGpu,
    victims: Sequence[GpuInstance],
    busy: set[int],
    by_id: dict[int, GiProfile],
    label: str | None = None,
) -> list[Step]:
    held = [g for g in victims if g.id in busy]
    if held:
        who = "; ".join(f"{_gi_label(g, by_id)} is used by {_holders(nvml, gpu, g.id)}" for g in held)
        raise Busy(f"{label or _label(gpu)}: {who}", device=gpu.bdf, hint="stop those processes first")
    steps = []
    for gi in victims:
        for ci in gi.compute_instances:
            steps.append(
                Step(
                    "destroy-ci",
                    gpu,
                    f"destroy compute instance {ci.id} of GI {gi.id} ({ci.uuid})",
                    gi_id=gi.id,
                    ci_id=ci.id,
                )
            )
        steps.append(
            Step(
                "destroy-gi",
                gpu,
                f"destroy {_gi_label(gi, by_id)} at slots {gi.start}-{gi.start + gi.size - 1}",
                gi_id=gi.id,
                gi_record=gi,
            )
        )
    return steps


class ResetRequired(Conflict):
    """A MIG mode change needs a GPU reset and resetting was not allowed (--no-reset)."""


class ResetBlocked(Busy):
    """A MIG mode change needs a GPU reset and processes hold the GPU."""


def _mode_steps(
    nvml: Nvml, gpu: NvmlGpu, enable: bool, current: bool, pending: bool, allow_reset: bool, label: str
) -> list[Step]:
    word = "enable" if enable else "disable"
    steps = []
    if pending != enable:
        steps.append(Step("set-mode", gpu, f"{word} MIG mode", enable=enable))
    if current != enable and needs_reset(gpu):
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
        steps.append(Step("reset", gpu, "reset the GPU to apply the MIG mode", enable=enable))
    return steps


# ----------------------------------------------------------------------------- apply / roll back
def apply(nvml: Nvml, plans: Sequence[GpuPlan]) -> None:
    """Run every step; on failure undo this run's steps in reverse order and re-raise."""
    undo: list[Callable[[], object]] = []
    created: dict[int, int] = {}  # id(create-gi step) -> GI id
    try:
        for plan in plans:
            for step in plan.steps:
                _run(nvml, step, plan.steps, created, undo)
    except VgpukitError as exc:
        failures = []
        for fn in reversed(undo):
            try:
                fn()
            except VgpukitError as uexc:  # keep undoing the rest
                failures.append(str(uexc))
        extra = f"; rollback incomplete: {'; '.join(failures)}" if failures else "; rolled back what this run changed"
        exc.message += extra
        exc.args = (exc.message,)
        raise


def _run(nvml: Nvml, step: Step, steps: list[Step], created: dict[int, int], undo: list[Callable[[], object]]) -> None:
    i = step.gpu.index
    if step.action == "destroy-ci":
        assert step.gi_id is not None and step.ci_id is not None
        nvml.destroy_compute_instance(i, step.gi_id, step.ci_id)
    elif step.action == "destroy-gi":
        assert step.gi_id is not None and step.gi_record is not None
        nvml.destroy_gpu_instance(i, step.gi_id)
        undo.append(partial(_recreate, nvml, i, step.gi_record))
    elif step.action == "set-mode":
        applied = nvml.set_mig_mode(i, step.enable)
        undo.append(partial(nvml.set_mig_mode, i, not step.enable))
        if not applied and not step.pending_ok and not any(s.action == "reset" and s.gpu.index == i for s in steps):
            raise Conflict(
                f"{step.label or _label(step.gpu)}: the MIG mode change is pending (GPU held or reset required)",
                hint="stop what holds the GPU and rerun, or reset it yourself (nvidia-smi -r)",
            )
    elif step.action == "reset":
        nvml.reset_gpu(i)
        undo.append(partial(_mode_back_and_reset, nvml, i, not step.enable))
    elif step.action == "create-gi":
        assert step.profile is not None
        gi = nvml.create_gpu_instance(i, step.profile.id, step.start)
        created[id(step)] = gi.id
        undo.append(partial(nvml.destroy_gpu_instance, i, gi.id))
    elif step.action == "create-ci":
        gi_id = step.gi_id if step.ref is None else created[id(steps[step.ref])]
        assert gi_id is not None and step.ci_slices is not None
        ci = nvml.create_compute_instance(i, gi_id, ci_enum(step.ci_slices))
        undo.append(partial(nvml.destroy_compute_instance, i, gi_id, ci.id))


def _recreate(nvml: Nvml, gpu: int, rec: GpuInstance) -> None:
    gi = nvml.create_gpu_instance(gpu, rec.profile_id, rec.start)
    for ci in rec.compute_instances:
        nvml.create_compute_instance(gpu, gi.id, ci.profile, ci.start)


def _mode_back_and_reset(nvml: Nvml, gpu: int, enabled: bool) -> None:
    nvml.set_mig_mode(gpu, enabled)
    nvml.reset_gpu(gpu)
