"""What the Kubernetes commands read of a device's health at every poll: the health layer's unusable
devices and the quarantined ones (docs/health.md, "Remediation"), and the node agent's remediation
option. A fresh :class:`~vgpukit.clikit.context.App` per look: nothing cached from the previous one."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from ..clikit.context import App
from ..clikit.params import AsciiFloat

if TYPE_CHECKING:
    from .agent import Agent
    from .inventory import Inventory

remediate_every_option = click.option(
    "--remediate-every",
    "remedy_s",
    type=AsciiFloat(0, 86400),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Run the installed remediation policy this often, its events as Kubernetes Events (0: never).",
)


def health(app: App) -> Callable[[], dict[str, str]]:
    """The unusable devices (BDF -> why) at every poll, from the health layer (which records them), and the
    quarantined ones (vgpukit quarantine / drain / remediate) and their VFs."""
    from .. import quarantine as qr
    from ..health import fact

    def look() -> dict[str, str]:
        fresh = App(root=app.root, sim_dir=app.sim_dir, wiring=app.wiring)
        try:
            devices = fact.current(fresh.host, fresh.nvml)
            # BDFs, and MIG devices' UUIDs; a quarantine's reason first
            return {**fact.unusable(devices), **fact.unusable_slices(devices), **qr.reasons(fresh.host)}
        finally:
            fresh.close()

    return look


def evicting(app: App) -> Callable[[], dict[str, str]]:
    """The quarantined devices whose pods Kubernetes should evict (BDF -> why) at every publication."""
    from .. import quarantine as qr

    def look() -> dict[str, str]:
        fresh = App(root=app.root, sim_dir=app.sim_dir, wiring=app.wiring)
        try:
            return qr.evicting(fresh.host)
        finally:
            fresh.close()

    return look


def with_remediation(agent: Agent, app: App, command: str, seconds: float) -> Agent:
    """The agent running the installed remediation policy every ``seconds`` (0: never)."""
    from .agent import RemedyRunner

    if seconds > 0:  # the policy the applied config installed (none: no events)
        agent.remedy = RemedyRunner(command, root=app.root, sim_dir=app.sim_dir)
        agent.remedy_s = seconds
    return agent


def unhealthy(app: App, inv: Inventory) -> dict[str, str]:
    """Device ID -> why, of the devices ``inv`` offers that the running plugin would list Unhealthy: the
    health rule's (what :func:`health` looks at: unusable or quarantined) for the device, its PCI function
    or that function's PF (``k8s resources`` marks them as the plugin does; docs/health.md, "One bad
    device"). A read: the health record is not written."""
    from .. import quarantine as qr
    from ..health import fact

    found = fact.current(app.host, app.nvml, save=False)  # a read: the health record is left as it is
    sick = {**fact.unusable(found), **fact.unusable_slices(found), **qr.reasons(app.host)}  # as health()
    out: dict[str, str] = {}
    for devices in inv.resources.values():
        for d in devices:
            fn = inv.pci.get(d.topo_bdf)
            pf = fn.physfn if fn is not None else None
            why = sick.get(d.id) or sick.get(d.topo_bdf) or (sick.get(pf) if pf else None)
            if why is not None:
                out[d.id] = why
    return out


def finish_unhealthy(app: App, inv: Inventory, marked: dict[str, str]) -> None:
    """End ``k8s resources`` with exit 6 naming the first device offered Unhealthy (and how many more)."""
    if not marked:
        return
    from ..clikit.output import fail_after_emit
    from ..errors import DeviceUnusable

    first, why = next(iter(sorted(marked.items())))
    bdf = next((d.topo_bdf for ds in inv.resources.values() for d in ds if d.id == first), "")
    more = f"; and {len(marked) - 1} more" if len(marked) > 1 else ""
    err = DeviceUnusable(
        f"{first} is offered Unhealthy: {why}{more}", device=bdf or None, hint=f"see: vgpukit health {bdf}".strip()
    )
    fail_after_emit(app, err)
