"""What ``mig status`` / ``mig profiles`` show: data collected from the facade (rendered by cli_view)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import Unsupported
from ..nvml import GiProfile, Nvml, NvmlGpu
from ..partial import Unread, each_gpu
from . import planner
from .spec import ci_allowed


def gpu_status(nvml: Nvml, gpu: NvmlGpu) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "gpu": f"gpu{gpu.index}",
        "index": gpu.index,
        "bdf": gpu.bdf,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "mig_capable": gpu.mig_capable,
    }
    if not gpu.mig_capable:
        return doc
    current, pending = nvml.mig_mode(gpu.index)
    doc["mig"] = {"current": current, "pending": pending, "change_pending": current != pending}
    profiles = nvml.gi_profiles(gpu.index)
    by_id = {p.id: p for p in profiles}
    slots = planner.memory_slots(profiles)
    gis = nvml.gpu_instances(gpu.index) if current else []
    procs = nvml.processes(gpu.index)
    doc["memory_slots"] = slots
    doc["gpu_instances"] = []
    owner: list[int | None] = [None] * slots
    for gi in gis:
        p = by_id.get(gi.profile_id)
        for s in range(gi.start, gi.start + gi.size):
            owner[s] = gi.id
        name = p.name if p else str(gi.profile_id)
        doc["gpu_instances"].append(
            {
                "id": gi.id,
                "profile": name,
                "profile_name": name,
                "profile_id": gi.profile_id,
                "placement": {"start": gi.start, "size": gi.size},
                "compute_instances": [
                    {
                        "id": c.id,
                        "profile": c.profile,  # NVML's CI profile enum: v1 keeps its type (docs/mig.md)
                        "profile_name": name if p is None or c.slices == p.slices else f"{c.slices}c.{name}",
                        "slices": c.slices,
                        "start": c.start,
                        "uuid": c.uuid,
                    }
                    for c in gi.compute_instances
                ],
                "processes": [{"pid": pr.pid, "name": pr.name} for pr in procs if pr.gi_id == gi.id],
            }
        )
    doc["free_slots"] = [i for i, o in enumerate(owner) if o is None]
    total = max((p.slices for p in profiles), default=0)
    used = sum(by_id[g.profile_id].slices for g in gis if g.profile_id in by_id)
    doc["compute_slices"] = {"total": total, "free": total - used}
    occ = [planner.Occupant(g.profile_id, g.start, g.size, "") for g in gis]
    largest = planner.future_largest(profiles, occ) if current else None
    doc["largest_free_profile"] = largest.name if largest else None
    doc["slot_owner"] = owner
    doc["gpu_processes"] = [{"pid": p.pid, "name": p.name} for p in procs if p.gi_id is None]
    return doc


def statuses(nvml: Nvml, gpus: list[NvmlGpu], names: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[Unread]]:
    """:func:`gpu_status` of each GPU; a GPU NVML cannot answer for (lost, or a call on it failed) is
    listed with what is known and ``unreadable`` (why), and returned among the unread."""
    done, unread = each_gpu(gpus, lambda g: gpu_status(nvml, g), names)
    docs = {g.index: doc for g, doc in done}
    why = {u.bdf or u.device: u.reason for u in unread}
    out = []
    for g in gpus:
        if g.index in docs:
            out.append(docs[g.index])
            continue
        out.append(
            {
                "gpu": f"gpu{g.index}",
                "index": g.index,
                "bdf": g.bdf,
                "uuid": g.uuid,
                "name": g.name,
                "mig_capable": g.mig_capable,
                "unreadable": why.get(g.bdf or f"gpu{g.index}", "not read"),
            }
        )
    return out, unread


def profiles_doc(nvml: Nvml, gpu: NvmlGpu) -> dict[str, Any]:
    if not gpu.mig_capable:
        raise Unsupported(f"gpu{gpu.index} ({gpu.name}) is not MIG-capable", device=gpu.bdf)
    current, _ = nvml.mig_mode(gpu.index)
    rows = []
    for p in sorted(nvml.gi_profiles(gpu.index), key=lambda p: (p.slices, p.size, p.media)):
        rows.append(
            {
                "name": p.name,
                "id": p.id,
                "slices": p.slices,
                "memory_slots": p.size,
                "memory_mib": p.memory_mib,
                "sms": p.sms,
                "max_count": p.max_count,
                "remaining": nvml.remaining_capacity(gpu.index, p.id) if current else None,
                "placements": [{"start": s, "size": p.size} for s in p.starts],
                "compute_instances": _ci_names(p),
            }
        )
    return {"gpu": f"gpu{gpu.index}", "bdf": gpu.bdf, "name": gpu.name, "mig_enabled": current, "profiles": rows}


def _ci_names(p: GiProfile) -> list[str]:
    return [p.name if c == p.slices else f"{c}c.{p.name}" for c in sorted(ci_allowed(p))]


def require(nvml: Nvml | None) -> Nvml:
    """The NVML facade, or Unsupported where there is none (no driver loaded)."""
    if nvml is None:
        raise Unsupported("no NVIDIA driver here: NVML is not available", hint="install the driver, or use --sim DIR")
    return nvml
