"""``vgpukit mig ...`` and ``vgpukit partition``: MIG through NVML, planned before it is applied."""

from __future__ import annotations

from typing import Any

import click

from .. import naming
from ..cli.context import App
from ..cli.main import dry_run_option, json_option, mutating
from ..cli.output import emit, emit_result, say
from ..errors import Busy, InvalidInput, Unsupported, VgpukitError
from ..nvml import Nvml, NvmlGpu
from ..pci import Scan
from . import engine, view


def nvml_of(app: App) -> Nvml:
    nvml = app.nvml
    if nvml is None:
        raise Unsupported("no NVIDIA driver here: NVML is not available", hint="install the driver, or use --sim DIR")
    return nvml


def resolve_gpu(app: App, name: str, scan: Scan) -> NvmlGpu:
    """The GPU ``name`` names (gpuN, NVML index, PCI address, GPU UUID; see :mod:`vgpukit.naming`)."""
    nvml = nvml_of(app)
    t = naming.resolve(app.host, name, frozenset({naming.GPU}), nvml=nvml, scan=scan)
    assert t.nvml_index is not None
    return nvml.gpus()[t.nvml_index]


def aliases(scan: Scan) -> dict[str, str]:
    try:
        return naming.aliases(scan)
    except VgpukitError:  # no sysfs (odd root): fall back to NVML order
        return {}


def label_of(scan: Scan, gpu: NvmlGpu) -> str:
    return f"{aliases(scan).get(gpu.bdf, f'gpu{gpu.index}')} ({gpu.bdf})"


def _named(scan: Scan, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = aliases(scan)
    for d in docs:
        d["gpu"] = names.get(d["bdf"], d["gpu"])
    return docs


@click.group()
def mig() -> None:
    """MIG: status, profiles, destroy, disable, and mig-parted configs (apply/assert/export).

    Carve a GPU with 'vgpukit partition GPU --mig 3g.20gb,1g.5gb=2'.
    """


@mig.command("status")
@click.argument("gpu", required=False)
@json_option
@click.pass_obj
def status(app: App, gpu: str | None) -> None:
    """MIG mode, GPU/compute instances, MIG UUIDs and a map of the memory slots."""
    nvml = nvml_of(app)
    scan = Scan(app.host)
    gpus = [resolve_gpu(app, gpu, scan)] if gpu else nvml.gpus()
    docs = _named(scan, [view.gpu_status(nvml, g) for g in gpus])
    emit(app, "mig-status", {"gpus": docs}, lambda: view.show_status(docs))


@mig.command("profiles")
@click.argument("gpu")
@json_option
@click.pass_obj
def profiles(app: App, gpu: str) -> None:
    """The GPU's MIG profiles: id, slices, memory, SMs, remaining capacity, placements."""
    nvml = nvml_of(app)
    scan = Scan(app.host)
    doc = view.profiles_doc(nvml, resolve_gpu(app, gpu, scan))
    doc["gpu"] = aliases(scan).get(doc["bdf"], doc["gpu"])
    emit(app, "mig-profiles", doc, lambda: view.show_profiles(doc))


def run_plans(
    app: App, scan: Scan, kind: str, plans: list[engine.GpuPlan], extra: dict[str, Any] | None = None
) -> None:
    """Apply (unless dry run) and report; show the resulting MIG devices of the GPUs touched."""
    nvml = nvml_of(app)
    steps = [s.describe() for p in plans for s in p.steps]
    if not app.dry_run and steps:
        engine.apply(nvml, plans)
    gpus = {p.gpu.index: p.gpu for p in plans}
    now = nvml.gpus()  # once: their MIG mode as it is after the change
    docs = _named(scan, [view.gpu_status(nvml, now[i]) for i in sorted(gpus)])
    placements = [
        {"gpu": s.gpu.index, "profile": s.profile.name, "start": s.start, "size": s.profile.size}
        for p in plans
        for s in p.steps
        if s.action == "create-gi" and s.profile is not None
    ]
    emit_result(
        app,
        kind,
        plan=steps,
        data={"placements": placements, "gpus": docs, **(extra or {})},
        human=None if app.dry_run else (lambda: view.show_status(docs)),
    )


@click.command("partition")
@click.argument("gpu")
@click.option(
    "--mig",
    "mig_specs",
    multiple=True,
    required=True,
    metavar="PROFILE[=N][,...]",
    help="GPU instances wanted, e.g. 3g.20gb,1g.5gb=2 (repeatable).",
)
@click.option(
    "--ci",
    "ci_specs",
    multiple=True,
    metavar="CPROFILE[=N][,...]",
    help="Compute instances of each new GPU instance of that profile, e.g. 1c.3g.20gb=3.",
)
@click.option(
    "--reset/--no-reset",
    default=None,
    help="Reset the GPU when the MIG mode change needs it (Ampere). Default: reset only when NVML shows no "
    "process on the GPU, like nvidia-smi -mig 1; --no-reset refuses instead.",
)
@click.option("--replace", is_flag=True, help="Also destroy idle GPU instances the request does not list.")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def partition(
    app: App, gpu: str, mig_specs: tuple[str, ...], ci_specs: tuple[str, ...], reset: bool | None, replace: bool
) -> None:
    """Make GPU hold (at least) the listed MIG instances, with placements chosen by the planner.

    Existing instances that match are kept; MIG mode is enabled if needed. Run it twice: the second
    run does nothing. --dry-run prints the placements and exits non-zero when the request cannot fit.
    """
    from .spec import parse_request

    nvml = nvml_of(app)
    scan = Scan(app.host)
    g = resolve_gpu(app, gpu, scan)
    if not g.mig_capable:
        raise Unsupported(f"{gpu} ({g.name}) is not MIG-capable", device=g.bdf)
    wants = parse_request(nvml.gi_profiles(g.index), mig_specs, ci_specs, f"{gpu} ({g.name})")
    if not wants:
        raise InvalidInput("--mig lists no GPU instance")
    try:
        plan = engine.plan_gpu(
            nvml,
            engine.GpuRequest(g, True, wants, exact=replace, label=label_of(scan, g)),
            allow_reset=reset is not False,
        )
    except engine.ResetRequired as exc:
        words = ["vgpukit", "partition", gpu, *(f"--mig {m}" for m in mig_specs), *(f"--ci {c}" for c in ci_specs)]
        exc.hint = f"nothing was changed; to reset the GPU as part of it: {' '.join(words)}"
        raise
    run_plans(app, scan, "mig-partition", [plan])


@mig.command("destroy")
@click.argument("gpu")
@click.option("--gi", "gi_ids", type=int, multiple=True, metavar="ID", help="GPU instance id (repeatable).")
@click.option("--all", "all_", is_flag=True, help="Every GPU instance of the GPU.")
@click.option("--force", is_flag=True, help="Destroy the idle ones and skip busy ones (default: refuse all).")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def destroy(app: App, gpu: str, gi_ids: tuple[int, ...], all_: bool, force: bool) -> None:
    """Destroy GPU instances (and their compute instances)."""
    from .destroy import plan_destroy

    if bool(gi_ids) == all_:
        raise InvalidInput("give --gi ID (repeatable) or --all")
    nvml = nvml_of(app)
    scan = Scan(app.host)
    g = resolve_gpu(app, gpu, scan)
    plan, skipped = plan_destroy(nvml, g, None if all_ else list(gi_ids), force, label_of(scan, g))
    run_plans(app, scan, "mig-destroy", [plan], {"skipped_busy": skipped})
    if skipped:
        raise Busy(f"skipped busy GPU instance(s): {', '.join(skipped)}")


@mig.command("disable")
@click.argument("gpu")
@click.option(
    "--reset/--no-reset",
    default=None,
    help="Reset the GPU so the change applies now (Ampere). Default: reset when no process holds the GPU, "
    "else leave the change pending until the next reset; --no-reset always leaves it pending.",
)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def disable(app: App, gpu: str, reset: bool | None) -> None:
    """Turn MIG mode off (the GPU must have no GPU instances left)."""
    nvml = nvml_of(app)
    scan = Scan(app.host)
    g = resolve_gpu(app, gpu, scan)
    try:
        plan = engine.plan_gpu(
            nvml, engine.GpuRequest(g, False, label=label_of(scan, g)), allow_reset=reset is not False
        )
    except (engine.ResetRequired, engine.ResetBlocked):
        if reset:
            raise
        # without --reset, disabling is accepted and takes effect at the next reset (like nvidia-smi)
        steps = [
            engine.Step(
                "set-mode", g, "disable MIG mode (pending until the GPU is reset)", enable=False, pending_ok=True
            )
        ]
        plan = engine.GpuPlan(g, steps, [])
    run_plans(app, scan, "mig-disable", [plan])
    pending = any(s.pending_ok for s in plan.steps)
    if not app.dry_run and not app.json and pending:
        say(f"MIG stays on until {gpu} is reset: vgpukit mig disable {gpu} --reset (or reboot)")


from .config_cli import apply_cmd, assert_cmd, export_cmd  # noqa: E402

mig.add_command(apply_cmd)
mig.add_command(assert_cmd)
mig.add_command(export_cmd)
