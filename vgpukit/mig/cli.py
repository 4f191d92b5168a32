"""``vgpukit mig ...`` and ``vgpukit partition``: MIG through NVML, planned before it is applied."""

from __future__ import annotations

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, fail_after_emit, finish_read, say
from ..clikit.params import GPU_DEVICE, AsciiInt, MigProfiles
from ..errors import Busy, InvalidInput, Unsupported
from ..partial import as_json
from ..pci import Scan
from . import view
from .cli_common import aliases, health_of, label_of, named, nvml_of, resolve_gpu, run_plans
from .cli_view import show_profiles, show_status

# the mig-parted commands (and the YAML, hooks and config code behind them) load only when used
_CONFIG_COMMANDS = {
    name: ("vgpukit.mig.cli_config", f"{name}_cmd", "") for name in ("apply", "assert", "export", "service")
}


@click.group(cls=LazyGroup, lazy=_CONFIG_COMMANDS)
def mig() -> None:
    """MIG: status, profiles, destroy, disable, and mig-parted configs (apply/assert/export).

    Carve a GPU with 'vgpukit partition GPU --mig 3g.20gb,1g.5gb=2'.
    """


@mig.command("status")
@click.argument("gpu", required=False, type=GPU_DEVICE)
@json_option
@click.pass_obj
def status(app: App, gpu: str | None) -> None:
    """MIG mode, GPU/compute instances, MIG UUIDs and a map of the memory slots."""
    nvml = nvml_of(app)
    scan = Scan(app.host)
    gpus = [resolve_gpu(app, gpu, scan)] if gpu else nvml.gpus()
    docs, unread = view.statuses(nvml, gpus, aliases(scan))  # a GPU NVML cannot answer for: marked
    docs = named(scan, docs)
    emit(app, "mig-status", {"gpus": docs, "unreadable": as_json(unread)}, lambda: show_status(docs))
    finish_read(app, unread, alone=gpu is not None)


@mig.command("profiles")
@click.argument("gpu", type=GPU_DEVICE)
@json_option
@click.pass_obj
def profiles(app: App, gpu: str) -> None:
    """The GPU's MIG profiles: id, slices, memory, SMs, remaining capacity, placements."""
    nvml = nvml_of(app)
    scan = Scan(app.host)
    g = resolve_gpu(app, gpu, scan)
    if g.lost:  # a read of one GPU NVML cannot answer for: that GPU's refusal, as every door gives it
        from . import layout

        layout.refuse_unusable(g, label_of(scan, g), health_of(app))
    doc = view.profiles_doc(nvml, g)
    doc["gpu"] = aliases(scan).get(doc["bdf"], doc["gpu"])
    emit(app, "mig-profiles", doc, lambda: show_profiles(doc))


@click.command("partition")
@click.argument("gpu", type=GPU_DEVICE)
@click.option(
    "--mig",
    "mig_specs",
    multiple=True,
    required=True,
    type=MigProfiles(),
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
    help="Reset the GPU when the MIG mode change needs it (Ampere; default: only when NVML shows no "
    "process on the GPU, like nvidia-smi -mig 1); --no-reset refuses instead.",
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
    from . import layout  # the planner loads with the commands that plan (status does not)
    from .spec import parse_request

    nvml = nvml_of(app)
    scan = Scan(app.host)
    g = resolve_gpu(app, gpu, scan)
    unusable = health_of(app).get(g.bdf)
    from .. import quarantine as qr

    qr.refuse(app.host, g.bdf, label_of(scan, g))
    layout.refuse_unusable(g, label_of(scan, g), {g.bdf: unusable} if unusable else None)
    if not g.mig_capable:
        raise Unsupported(f"{gpu} ({g.name}) is not MIG-capable", device=g.bdf)
    wants = parse_request(nvml.gi_profiles(g.index), mig_specs, ci_specs, f"{gpu} ({g.name})")
    if not wants:
        raise InvalidInput("--mig lists no GPU instance")
    try:
        plan = layout.plan_gpu(
            nvml,
            layout.GpuRequest(g, True, wants, exact=replace, label=label_of(scan, g), unusable=unusable),
            allow_reset=reset is not False,
        )
    except layout.ResetRequired as exc:
        words = ["vgpukit", "partition", gpu, *(f"--mig {m}" for m in mig_specs), *(f"--ci {c}" for c in ci_specs)]
        exc.hint = f"nothing was changed; to reset the GPU as part of it: {' '.join(words)}"
        raise
    run_plans(app, "mig-partition", [plan], scan=scan)


@mig.command("destroy")
@click.argument("gpu", type=GPU_DEVICE)
@click.option(
    "--gi", "gi_ids", type=AsciiInt(0, 255), multiple=True, metavar="ID", help="GPU instance id (repeatable)."
)
@click.option("--all", "all_", is_flag=True, help="Every GPU instance of the GPU.")
@click.option("--force", is_flag=True, help="Destroy the idle ones and skip busy ones (default: refuse all).")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def destroy(app: App, gpu: str, gi_ids: tuple[int, ...], all_: bool, force: bool) -> None:
    """Destroy GPU instances (and their compute instances)."""
    from . import layout
    from .destroy import plan_destroy

    if bool(gi_ids) == all_:
        raise InvalidInput("give --gi ID (repeatable) or --all")
    nvml = nvml_of(app)
    scan = Scan(app.host)
    g = resolve_gpu(app, gpu, scan)
    if g.lost:  # it answers no NVML call: the health layer's refusal, as every door gives it
        layout.refuse_unusable(g, label_of(scan, g), health_of(app))
    plan, skipped = plan_destroy(nvml, g, None if all_ else list(gi_ids), force, label_of(scan, g))
    run_plans(app, "mig-destroy", [plan], {"skipped_busy": skipped}, scan=scan)
    if skipped:
        fail_after_emit(app, Busy(f"skipped busy GPU instance(s): {', '.join(skipped)}"))


@mig.command("disable")
@click.argument("gpu", type=GPU_DEVICE)
@click.option(
    "--reset/--no-reset",
    default=None,
    help="Reset the GPU so the change applies now (Ampere; default: when no process holds the GPU, "
    "else the change stays pending until the next reset); --no-reset always leaves it pending.",
)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def disable(app: App, gpu: str, reset: bool | None) -> None:
    """Turn MIG mode off (the GPU must have no GPU instances left)."""
    from . import layout  # the planner loads with the commands that plan (status does not)
    from .steps import SetMode

    nvml = nvml_of(app)
    scan = Scan(app.host)
    g = resolve_gpu(app, gpu, scan)
    if g.lost:  # it answers no NVML call: the health layer's refusal, as every door gives it
        layout.refuse_unusable(g, label_of(scan, g), health_of(app))
    try:
        plan = layout.plan_gpu(
            nvml, layout.GpuRequest(g, False, label=label_of(scan, g)), allow_reset=reset is not False
        )
    except (layout.ResetRequired, layout.ResetBlocked):
        if reset:
            raise
        # without --reset, disabling is accepted and takes effect at the next reset (like nvidia-smi)
        plan = layout.GpuPlan(g, [SetMode(g.bdf, label_of(scan, g), False, pending_ok=True)], [])
    run_plans(app, "mig-disable", [plan], scan=scan)
    pending = any(isinstance(s, SetMode) and s.pending_ok and not s.then_reset for s in plan.steps)
    if not app.dry_run and not app.json and pending:
        say(f"MIG stays on until {gpu} is reset: vgpukit mig disable {gpu} --reset (or reboot)")
