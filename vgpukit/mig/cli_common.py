"""What the ``mig`` commands share: the NVML handle, GPU names, running a plan and reporting it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import naming
from ..clikit.context import App
from ..clikit.output import emit_result
from ..errors import VgpukitError
from ..nvml import Nvml, NvmlGpu
from ..pci import Scan
from . import view
from .cli_view import show_status

if TYPE_CHECKING:
    from . import layout, steps


def nvml_of(app: App) -> Nvml:
    """The command's NVML facade (the one its engine steps use); Unsupported where there is none.
    Read from the command's context, not its engine env: a read loads none of the change machinery."""
    return view.require(app.nvml)


def health_of(app: App) -> dict[str, str]:
    """The health fact the planners consult: BDF -> why, of the devices the health layer finds unusable."""
    from ..health import fact

    return fact.unusable(fact.current(app.host, app.nvml, save=False))


def resolve_gpu(app: App, name: str, scan: Scan) -> NvmlGpu:
    """The GPU ``name`` names (gpuN, NVML index, PCI address, GPU UUID; see :mod:`vgpukit.naming`)."""
    nvml = nvml_of(app)
    t = naming.resolve(app.host, name, frozenset({naming.GPU}), nvml=nvml, scan=scan)
    assert t.nvml_index is not None
    return nvml.gpus()[t.nvml_index]


def aliases(scan: Scan) -> dict[str, str]:
    try:  # the mig commands show the GPUs' aliases and read no more of the PCI devices: the light read
        return naming.aliases(scan, light=True)
    except VgpukitError:  # no sysfs (odd root): fall back to NVML order
        return {}


def label_of(scan: Scan, gpu: NvmlGpu) -> str:
    return f"{aliases(scan).get(gpu.bdf, f'gpu{gpu.index}')} ({gpu.bdf})"


def named(scan: Scan, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = aliases(scan)
    for d in docs:
        d["gpu"] = names.get(d["bdf"], d["gpu"])
    return docs


def run_plans(
    app: App, kind: str, plans: list[layout.GpuPlan], extra: dict[str, Any] | None = None, *, scan: Scan
) -> None:
    """Apply (unless dry run) and report; show the resulting MIG devices of the GPUs touched."""
    from ..engine import execute

    todo = [s for p in plans for s in p.steps]
    if not app.dry_run and todo:
        execute(app.env, todo)
    report_plans(app, kind, plans, todo, extra, scan=scan)


def report_plans(
    app: App,
    kind: str,
    plans: list[layout.GpuPlan],
    todo: list[steps.MigStep],
    extra: dict[str, Any] | None = None,
    *,
    scan: Scan,
) -> None:
    """Report steps done (or planned, on a dry run): a line per GPU (every step and the GPUs' MIG
    devices with -v); the document has the steps, the placements, the GPUs touched and the summary."""
    from .steps import CreateGi
    from .summary import gpu_summaries, line

    nvml = nvml_of(app)
    gpus = {p.gpu.index: p.gpu for p in plans}
    now = nvml.gpus()  # once: their MIG mode as it is after the change
    docs = named(scan, [view.gpu_status(nvml, now[i]) for i in sorted(gpus)])
    created = {s for s in todo if isinstance(s, CreateGi)}  # a set: looked up, not searched for in todo
    placements = [
        {"gpu": p.gpu.index, "profile": s.profile, "start": s.start, "size": s.size}
        for p in plans
        for s in p.steps
        if isinstance(s, CreateGi) and s in created
    ]
    summary = gpu_summaries(plans, todo, docs, app.dry_run)
    emit_result(
        app,
        kind,
        plan=[s.describe() for s in todo],
        data={
            "steps": [s.to_dict() for s in todo],
            "placements": placements,
            "gpus": docs,
            "summary": summary,
            **(extra or {}),
        },
        human=None if app.dry_run or not docs else (lambda: show_status(docs)),
        summary=[line(e) for e in summary],
    )
