"""``vgpukit quarantine|release|drain|reset|remediate DEVICE``: cure one device, nothing else on the host.

The front end: parse, read the device's facts (and the Kubernetes claims on it, which only a front
end may read), ask the planner (:mod:`.planner`), run the plan through the change engine, render.
docs/health.md, "Remediation".
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from ..clikit.context import App
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit_result, say, table
from ..clikit.params import DEVICE, AsciiFloat
from ..errors import InvalidInput, VgpukitError
from ..inputs import check_text
from ..libvirt.connection import DEFAULT_URI

# the document kinds (vgpukit.<kind>/v1): vgpukit/data/schemas/<kind>.json
KINDS = ("quarantine", "release", "drain", "reset", "remediate")
reason_option = click.option("--reason", metavar="WHY", help="Why (kept in the record and shown by every refusal).")
vms_option = click.option(
    "--vms",
    type=click.Choice(("migrate", "managedsave", "shutdown", "fail")),
    default="shutdown",
    show_default=True,
    help="What happens to VMs holding the device: live-migrate (--to), save, shut down, or refuse.",
)
to_option = click.option("--to", "dest", metavar="URI", help="Destination libvirt for --vms migrate.")
connect_option = click.option(
    "--connect",
    "uri",
    metavar="URI",
    envvar="VGPUKIT_LIBVIRT_URI",
    default=DEFAULT_URI,
    show_default=True,
    help="The libvirt the VMs are defined in (env VGPUKIT_LIBVIRT_URI).",
)
timeout_option = click.option(
    "--timeout",
    type=AsciiFloat(0, 86400),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for VMs to stop and every holder to go.",
)
force_option = click.option("--force", is_flag=True, help="Destroy a VM that does not shut down within --timeout.")
tenants_option = click.option(
    "--tenants",
    type=click.Choice(("wait", "stop")),
    default="wait",
    show_default=True,
    help="QoS tenants using the device: wait for their processes to end, or stop them (SIGTERM).",
)


def drain_options(f: Any) -> Any:
    """The options of a drain (``drain`` and ``remediate`` take the same), in the order --help shows them."""
    for option in (reason_option, tenants_option, force_option, timeout_option, connect_option, to_option, vms_option):
        f = option(f)
    return f


def _reason(text: str | None, default: str, f: Any = None) -> str:
    """The --reason given, else the device's own quarantine's (a quarantine again without --reason, a
    drain of a quarantined device, keep the operator's words), else ``default``."""
    if text is not None:
        return check_text(text, "--reason", max_len=500)
    own = getattr(f, "quarantine", None)
    return own.reason if own is not None and own.bdf == f.bdf and own.reason else default


def _facts(app: App, device: str) -> Any:
    from .facts import read

    return read(app.host, app.nvml, device)


def _claims(app: App, f: Any) -> tuple[str, ...]:
    """The UIDs of the Kubernetes claims prepared on the device or a piece of it (read only when the
    DRA plugin left claim records on this node)."""
    host = app.host
    if not host.is_dir(host.dra_claim_records()) or not host.listdir(host.dra_claim_records()):
        return ()
    from ..node.claimed import claims_by_id
    from ..node.inventory import Options, collect

    inv = collect(host, app.nvml, Options(replicas=0))
    c = f.carried
    pieces = {f.bdf, *(v.bdf for v in c.vfs), *(m.uuid for m in c.mdevs), *(ci.uuid for g in c.gis for ci in g.cis)}
    topo = {d.id: d.topo_bdf for devs in inv.resources.values() for d in devs}
    return tuple(
        sorted({ref.uid for dev, ref in claims_by_id(host, inv).items() if dev in pieces or topo.get(dev) == f.bdf})
    )


def _holders(holders: list[Any]) -> None:
    if holders:
        table("holders", ["KIND", "WHO", "PID", "HOLDS"], [[h.kind, h.name, h.pid or "", h.piece] for h in holders])


def _record(app: App, plan: Any, what: str, outcome: str, started: float, message: str = "") -> None:
    from ..remedies import Run, add

    if app.dry_run:
        return
    run = Run(
        started,
        plan.label.split(" (")[0],
        plan.bdf,
        what,
        outcome,
        plan.action,
        plan.escalate,
        time.time() - started,
        message,
    )
    add(app.host, run)


def _kept(app: App, plan: Any, what: str, err: VgpukitError) -> None:
    """A failed plan that was rolled back and left the device quarantined says so, and why: the rollback
    lifts a quarantine only from a device that verifies healthy (or puts back the one it had)."""
    from .. import quarantine as qr

    if "rolled back" not in err.message or what not in ("drain", "remediate"):
        return
    q = qr.load(app.host).get(plan.bdf)
    if q is None:
        return
    from .steps import unhealthy

    why = unhealthy(app.env, plan.bdf)
    because = f"it is not healthy ({why})" if why else f"it was before ({q.reason or 'no reason given'})"
    err.message = f"{err.message}; {plan.label} stays quarantined: {because}"
    err.args = (err.message,)


def report(app: App, kind: str, plan: Any, what: str, extra: dict[str, Any] | None = None) -> None:
    """Execute ``plan``, record it, report it (the plan, the holders, what is rebuilt)."""
    from ..engine import execute

    started = time.time()
    try:
        execute(app.env, plan.steps)
    except VgpukitError as err:
        _record(app, plan, what, "failed", started, str(err))
        _kept(app, plan, what, err)
        raise
    outcome = "escalated" if plan.escalate else "done"
    if plan.steps or plan.escalate:
        _record(app, plan, what, outcome, started, plan.escalate and f"needs a {plan.escalate}")
    steps = [{**s.to_dict(), "text": s.describe()} for s in plan.steps]  # a file step's own "text" is its content
    data = {**plan.as_dict(), "steps": steps, **(extra or {})}

    def human() -> None:
        _holders(plan.holders)
        if plan.rebuild:
            say("rebuilds: " + "; ".join(plan.rebuild))

    # an escalation is said once, by the caller's error (exit 5), which names the reason and what to do
    emit_result(app, kind, plan=[s.describe() for s in plan.steps], data=data, human=human)


@click.command("quarantine")
@click.argument("device", type=DEVICE)
@reason_option
@click.option("--evict", is_flag=True, help="Also ask Kubernetes to evict its pods (the DRA taint NoExecute).")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def quarantine_cmd(app: App, device: str, reason: str | None, evict: bool) -> None:
    """Keep every door from placing work on DEVICE (and what is carved from it) until released."""
    from .. import quarantine as qr
    from . import planner

    f = _facts(app, device)
    q = qr.make(app.host, f.bdf, f.name, _reason(reason, "", f), evict=evict)
    plan = planner.Plan(f.bdf, f.label, holders=list(f.holders))
    plan.steps = planner.quarantine(f, q, app.host.display(app.host.quarantine_record(f.bdf)))
    report(app, "quarantine", plan, "quarantine")


@click.command("release")
@click.argument("device", type=DEVICE)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def release_cmd(app: App, device: str) -> None:
    """End DEVICE's quarantine: the doors place work on it again (the health layer's rules still hold)."""
    from . import planner

    f = _facts(app, device)
    plan = planner.Plan(f.bdf, f.label)
    plan.steps = planner.release(f, app.host.display(app.host.quarantine_record(f.bdf)))
    report(app, "release", plan, "release")


def _policy(vms: str, dest: str | None, uri: str, timeout: float, force: bool, tenants: str) -> Any:
    from .planner import DrainPolicy

    return DrainPolicy(vms, dest, uri, timeout, force, tenants)


@click.command("drain")
@click.argument("device", type=DEVICE)
@drain_options
@json_option
@dry_run_option
@click.pass_obj
@mutating
def drain_cmd(
    app: App,
    device: str,
    vms: str,
    dest: str | None,
    uri: str,
    timeout: float,
    force: bool,
    tenants: str,
    reason: str | None,
) -> None:
    """Move all work off DEVICE and what is carved from it: VMs, processes, Kubernetes pods.

    Quarantines it (Kubernetes evicts: DRA taint NoExecute, device plugin Unhealthy), stops or moves
    the VMs holding a piece as --vms says, then waits until no holder is left and names who still is.
    """
    from .. import quarantine as qr
    from . import planner

    f = _facts(app, device)
    q = qr.make(app.host, f.bdf, f.name, _reason(reason, "draining", f), evict=True)
    path = app.host.display(app.host.quarantine_record(f.bdf))
    plan = planner.plan_drain(f, _policy(vms, dest, uri, timeout, force, tenants), q, path, _claims(app, f))
    report(app, "drain", plan, "drain")


def _action(app: App, f: Any) -> tuple[str, str, str]:
    """(action, where it comes from, the finding in words) of the device now."""
    from ..health import fact
    from .planner import action_of

    devices = fact.current(app.host, app.nvml, save=False)
    dev = next((d for d in devices if d.bdf == f.bdf), None)
    recovery = None
    if f.nvml_index is not None and app.nvml is not None:
        try:
            recovery = app.nvml.recovery_action(f.nvml_index)
        except VgpukitError:
            recovery = None
    health_action = dev.action if dev is not None and dev.state == "unusable" else "none"
    reasons = dev.reasons if dev is not None else ()
    action, source = action_of(health_action, reasons, recovery)
    return action, source, reasons[0] if reasons else ""


@click.command("reset")
@click.argument("device", type=DEVICE)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def reset_cmd(app: App, device: str) -> None:
    """Reset DEVICE the way its driver wants and rebuild exactly what it carried (refused while held)."""
    from . import planner

    f = _facts(app, device)
    action, source, _ = _action(app, f)
    report(app, "reset", planner.plan_reset(f, action, source), "reset")


@click.command("remediate")
@click.argument("device", type=DEVICE, required=False)
@click.option("--auto", is_flag=True, help="Run the remediation policy on every device instead (no DEVICE).")
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --auto: this policy (YAML) instead of /etc/vgpukit/remediation.yaml (what apply installed).",
)
@click.option(
    "--for", "seconds", type=AsciiFloat(0, 31536000), metavar="SECONDS", help="With --auto: stop after SECONDS."
)
@drain_options
@json_option
@dry_run_option
@click.pass_obj
@mutating
def remediate_cmd(
    app: App,
    device: str | None,
    auto: bool,
    policy_file: Path | None,
    seconds: float | None,
    vms: str,
    dest: str | None,
    uri: str,
    timeout: float,
    force: bool,
    tenants: str,
    reason: str | None,
) -> None:
    """Quarantine, drain, reset, rebuild, verify and release DEVICE: one journaled plan (--auto: the policy).

    A crash at any step is finished or undone by the next vgpukit command; the device stays quarantined
    until verified. A device that needs a reboot (or a new part) is quarantined and drained, and the
    escalation reported: vgpukit never reboots a host. --dry-run shows every holder and every piece
    it will rebuild.
    """
    if auto or device is None:
        if device is not None or not auto:
            raise InvalidInput("give DEVICE, or --auto (the policy, on every device), not both")
        from .cli_auto import run

        return run(app, policy_file, seconds)
    if policy_file is not None or seconds is not None:
        raise InvalidInput("--policy and --for go with --auto")
    from .. import quarantine as qr
    from . import planner

    f = _facts(app, device)
    action, source, finding = _action(app, f)
    why = _reason(reason, f"remediating ({finding or action})")
    q = qr.make(app.host, f.bdf, f.name, why, "remediate", evict=True, finding=finding, action=action)
    path = app.host.display(app.host.quarantine_record(f.bdf))
    policy = _policy(vms, dest, uri, timeout, force, tenants)
    plan = planner.plan_remediate(f, policy, q, path, action, source, _claims(app, f))
    report(app, "remediate", plan, "remediate")
    if plan.escalate:  # said once, as the one-line error (on stderr beside a --json document too)
        from ..clikit.output import fail_after_emit
        from ..errors import Unsupported

        fail_after_emit(
            app,
            Unsupported(
                f"{f.label} needs a {plan.escalate}: quarantined and drained, not reset ({source})",
                device=f.bdf,
                hint="reboot the host (vgpukit never does), then: vgpukit release " + f.name,
            ),
        )
