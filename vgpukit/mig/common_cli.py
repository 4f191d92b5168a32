"""What the ``mig`` commands share: the NVML handle, GPU names, running a plan and reporting it."""

from __future__ import annotations

from typing import Any

from ..cli.context import App
from ..cli.output import emit_result
from ..engine import execute
from ..errors import NotFound
from ..nvml import Nvml, NvmlGpu
from . import engine, steps, view
from .steps import CreateGi
from .view_cli import show_status


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
