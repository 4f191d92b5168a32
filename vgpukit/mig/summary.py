"""One line per GPU for a MIG change (``mig apply``, ``partition``, ``mig destroy``, ``mig disable``):
its MIG mode and slot map after the change, and how many steps it took. Every step is ``-v``'s (and
always in the ``--json`` document's ``plan`` and ``steps``). docs/cli.md, "What a change prints".

After a change the map comes from the GPUs as NVML now reports them; on a dry run it is the GPUs as
they are with the planned steps played over them (nothing is asked of the driver).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..words import plural

if TYPE_CHECKING:
    from . import layout, steps


def _gis(doc: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    """start slot -> {profile, start, size, compute_instances: [slices...]} of a status document."""
    if doc is None or not doc.get("mig", {}).get("current"):
        return {}
    return {
        gi["placement"]["start"]: {
            "profile": gi["profile"],
            "start": gi["placement"]["start"],
            "size": gi["placement"]["size"],
            "compute_instances": [ci["slices"] for ci in gi["compute_instances"]],
        }
        for gi in doc["gpu_instances"]
    }


def _planned(doc: dict[str, Any] | None, mine: list[steps.MigStep]) -> tuple[bool, bool, dict[int, dict[str, Any]]]:
    """(MIG mode, whether it waits for a reset, GPU instances) once ``mine`` is applied over ``doc``."""
    from .steps import CreateCi, CreateGi, DestroyCi, DestroyGi, Reset, SetMode

    mig = bool(doc and doc["mig"]["current"])
    pending = False
    gis = _gis(doc)
    for s in mine:
        if isinstance(s, SetMode):
            pending = s.enable != mig and s.pending_ok
            mig = s.enable if not s.pending_ok else mig
        elif isinstance(s, Reset):
            mig, pending = s.enable, False
        elif isinstance(s, DestroyGi):
            gis.pop(s.start, None)
        elif isinstance(s, CreateGi):
            gis[s.start] = {"profile": s.profile, "start": s.start, "size": s.size, "compute_instances": []}
        elif isinstance(s, DestroyCi) and s.slices in gis.get(s.gi_start, {}).get("compute_instances", []):
            gis[s.gi_start]["compute_instances"].remove(s.slices)
        elif isinstance(s, CreateCi) and s.gi_start in gis:
            gis[s.gi_start]["compute_instances"].append(s.slices)
    return mig, pending, gis if mig else {}


def gpu_summaries(
    plans: list[layout.GpuPlan], todo: list[steps.MigStep], docs: list[dict[str, Any]], dry_run: bool
) -> list[dict[str, Any]]:
    """The ``summary`` of a MIG document: one entry per GPU of the plans, in their order."""
    by_bdf = {d["bdf"]: d for d in docs}
    out = []
    for p in plans:
        doc = by_bdf.get(p.gpu.bdf)
        mine = [s for s in todo if s.bdf == p.gpu.bdf]
        if dry_run:
            mig, pending, gis = _planned(doc, mine)
        else:
            mig = bool(doc and doc["mig"]["current"])
            pending = bool(doc and doc["mig"]["change_pending"])
            gis = _gis(doc)
        out.append(
            {
                "gpu": doc["gpu"] if doc else f"gpu{p.gpu.index}",
                "bdf": p.gpu.bdf,
                "mig": mig,
                "mig_change_pending": pending,
                "slots": [gis[start] for start in sorted(gis)],
                "steps": len(mine),
            }
        )
    return out


def _slices(profile: str) -> int | None:
    head = profile.split("g.", 1)[0]
    return int(head) if head.isdigit() else None


def slot_map(slots: list[dict[str, Any]]) -> str:
    """``0-1:2g.10gb 2:1g.5gb 4-7:3g.20gb(3x1c)``: each GPU instance at its memory slots, and its
    compute instances when they are not one of the instance's full size."""
    words = []
    for gi in slots:
        where = f"{gi['start']}" if gi["size"] <= 1 else f"{gi['start']}-{gi['start'] + gi['size'] - 1}"
        cis = sorted(gi["compute_instances"], reverse=True)
        detail = ""
        if not cis:
            detail = "(no compute instance)"
        elif cis != [_slices(gi["profile"])]:
            detail = f"({len(cis)}x{cis[0]}c)" if len(set(cis)) == 1 else f"({'+'.join(f'{c}c' for c in cis)})"
        words.append(f"{where}:{gi['profile']}{detail}")
    return " ".join(words)


def line(entry: dict[str, Any]) -> str:
    """``gpu0 (0000:03:00.0)  MIG on  slots 0-1:2g.10gb 2:1g.5gb  (10 steps)``."""
    mode = "on" if entry["mig"] else "off"
    if entry["mig_change_pending"]:
        mode += " (changes at the next GPU reset)"
    where = f"  slots {slot_map(entry['slots'])}" if entry["slots"] else "  no MIG devices" if entry["mig"] else ""
    steps = f"  ({plural(entry['steps'], 'step')})" if entry["steps"] else "  (unchanged)"
    return f"{entry['gpu']} ({entry['bdf']})  MIG {mode}{where}{steps}"
