"""What the ``mig`` commands share: the NVML handle, GPU names, running a plan and rendering status."""

from __future__ import annotations

from typing import Any

from ..cli.context import App
from ..cli.output import emit_result, say, table
from ..engine import execute
from ..errors import NotFound
from ..nvml import Nvml, NvmlGpu
from . import engine, steps, view
from .steps import CreateGi

LETTERS = "ABCDEFGHIJKLMNOP"


def nvml_of(app: App) -> Nvml:
    """The command's NVML facade (the one its engine steps use); Unsupported where there is none."""
    return steps.nvml_of(app.env)


_SCANS: dict[int, list[Any]] = {}


def _scan(app: App) -> list[Any]:
    """The host's PCI devices, scanned once per invocation (naming and aliases share it)."""
    from ..pci import scan

    if id(app) not in _SCANS:
        _SCANS[id(app)] = scan(app.host)
    return _SCANS[id(app)]


def resolve_gpu(app: App, name: str) -> NvmlGpu:
    from ..naming import UUID_RE, resolve_in

    nvml = nvml_of(app)
    if name.isdigit():  # a bare NVML index, as nvidia-smi -i takes
        gpus = nvml.gpus()
        if int(name) >= len(gpus):
            raise NotFound(f"no GPU with NVML index {name}: this host has {len(gpus)}", value=name)
        return gpus[int(name)]
    uuids = {g.bdf: g.uuid for g in nvml.gpus()} if UUID_RE.match(name.strip()) else None
    return view.find_gpu(nvml, resolve_in(app.host, name, devices=_scan(app), gpu_uuids=uuids))


def aliases(app: App) -> dict[str, str]:
    from ..naming import aliases as pci_aliases

    try:
        return pci_aliases(_scan(app))
    except Exception:  # no sysfs (odd root): fall back to NVML order
        return {}


def label_of(app: App, gpu: NvmlGpu) -> str:
    return f"{aliases(app).get(gpu.bdf, f'gpu{gpu.index}')} ({gpu.bdf})"


def named(app: App, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = aliases(app)
    for d in docs:
        d["gpu"] = names.get(d["bdf"], d["gpu"])
    return docs


def run_plans(app: App, kind: str, plans: list[engine.GpuPlan], extra: dict[str, Any] | None = None) -> None:
    """Apply (unless dry run) and report; show the resulting MIG devices of the GPUs touched."""
    nvml = nvml_of(app)
    todo = [s for p in plans for s in p.steps]
    if not app.dry_run and todo:
        execute(app.env, todo)
    gpus = {p.gpu.index: p.gpu for p in plans}
    docs = named(app, [view.gpu_status(nvml, g) for g in (nvml.gpus()[i] for i in sorted(gpus))])
    placements = [
        {"gpu": p.gpu.index, "profile": s.profile, "start": s.start, "size": s.size}
        for p in plans
        for s in p.steps
        if isinstance(s, CreateGi)
    ]
    emit_result(
        app,
        kind,
        plan=[s.describe() for s in todo],
        data={
            "steps": [s.to_dict() for s in todo],
            "placements": placements,
            "gpus": docs,
            **(extra or {}),
        },
        human=None if app.dry_run else (lambda: show_status(docs)),
    )


def show_status(docs: list[dict[str, Any]]) -> None:
    if not docs:
        say("no NVIDIA GPU on this host")
    for doc in docs:
        head = f"{doc['gpu']}  {doc['bdf']}  {doc['name']}"
        if not doc["mig_capable"]:
            say(f"{head}  MIG: not capable")
            continue
        mig = doc["mig"]
        mode = "on" if mig["current"] else "off"
        if mig["change_pending"]:
            mode += f" (pending: {'on' if mig['pending'] else 'off'} after a GPU reset)"
        say(f"{head}  MIG: {mode}", "bold")
        if doc["gpu_processes"]:
            say("  held by: " + ", ".join(f"{p['name']} (pid {p['pid']})" for p in doc["gpu_processes"]))
        if not mig["current"]:
            continue
        letter = {gi["id"]: LETTERS[i % len(LETTERS)] for i, gi in enumerate(doc["gpu_instances"])}
        cells = [letter[o] if o is not None else "." for o in doc["slot_owner"]]
        say("  memory slots  " + " ".join(f"{i}" for i in range(doc["memory_slots"])))
        say("                " + " ".join(cells))
        rows = []
        for gi in doc["gpu_instances"]:
            place = f"{gi['placement']['start']}:{gi['placement']['size']}"
            users = ", ".join(f"{p['name']}({p['pid']})" for p in gi["processes"])
            if not gi["compute_instances"]:
                rows.append([letter[gi["id"]], gi["id"], gi["profile"], place, "-", "-", "(no compute instance)"])
            for ci in gi["compute_instances"]:
                rows.append(
                    [letter[gi["id"]], gi["id"], gi["profile"], place, ci["id"], f"{ci['slices']}c", ci["uuid"]]
                )
            if users:
                rows[-1][-1] += f"  used by {users}"
        if rows:
            table(None, ["", "GI", "PROFILE", "PLACEMENT", "CI", "CI SIZE", "MIG UUID"], rows)
        free = ",".join(str(s) for s in doc["free_slots"]) or "none"
        cs = doc["compute_slices"]
        say(
            f"  free memory slots: {free}; free compute slices: {cs['free']} of {cs['total']}; "
            f"largest profile still placeable: {doc['largest_free_profile'] or 'none'}"
        )


def show_profiles(doc: dict[str, Any]) -> None:
    rows = []
    for r in doc["profiles"]:
        places = ",".join(f"{x['start']}:{x['size']}" for x in r["placements"])
        remaining = "-" if r["remaining"] is None else f"{r['remaining']}/{r['max_count']}"
        rows.append([r["name"], r["id"], r["slices"], r["memory_mib"], r["sms"], remaining, places])
    note = "" if doc["mig_enabled"] else " (MIG off: remaining capacity shown once enabled)"
    table(
        f"{doc['gpu']} {doc['name']}{note}", ["PROFILE", "ID", "SLICES", "MiB", "SMs", "FREE/MAX", "PLACEMENTS"], rows
    )
