"""Planning ``mig destroy``: which GPU instances go, which are skipped because processes use them."""

from __future__ import annotations

from ..errors import Busy, NotFound
from ..nvml import Nvml, NvmlGpu
from . import layout


def plan_destroy(
    nvml: Nvml, gpu: NvmlGpu, gi_ids: list[int] | None, force: bool, label: str
) -> tuple[layout.GpuPlan, list[str]]:
    current, _ = nvml.mig_mode(gpu.index)
    existing = nvml.gpu_instances(gpu.index) if current else []
    if gi_ids is None:
        victims = existing
    else:
        known = {g.id: g for g in existing}
        missing = [i for i in gi_ids if i not in known]
        if missing:
            have = ", ".join(str(i) for i in sorted(known)) or "none"
            raise NotFound(f"{label} has no GPU instance {missing[0]}", hint=f"existing ids: {have}")
        victims = [known[i] for i in dict.fromkeys(gi_ids)]
    by_id = {p.id: p for p in nvml.gi_profiles(gpu.index)}
    busy = {p.gi_id for p in nvml.processes(gpu.index) if p.gi_id is not None}
    skipped = []
    if force:
        skipped = [layout._gi_label(g, by_id) for g in victims if g.id in busy]
        victims = [g for g in victims if g.id not in busy]
    try:
        steps = layout.destroy_steps(nvml, gpu, victims, busy, by_id, label)
    except Busy as exc:
        exc.hint = "--force destroys the idle ones and skips these"
        raise
    return layout.GpuPlan(gpu, steps, []), skipped
