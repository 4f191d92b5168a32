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
    from ..node.inventory import Inventory
    from .agent import Agent

remediate_every_option = click.option(
    "--remediate-every",
    "remedy_s",
    type=AsciiFloat(0, 86400),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Run the installed remediation policy when a device's health may have changed (host events), and at "
    "the latest this often; its events as Kubernetes Events (0: never).",
)


def health(app: App) -> Callable[[], dict[str, str]]:
    """The unusable devices (BDF -> why) at every poll, from the health layer (which records them; in memory
    while the record cannot be written, said once), the VFs of an unusable PF (a PF's fault takes its VFs
    with it, as the one exclusion predicate says), and the quarantined ones and their VFs."""
    from ..health import fact
    from ..health.log import Keeper
    from .unusable import unusable

    keeper = Keeper()

    def look() -> dict[str, str]:
        fresh = App(root=app.root, sim_dir=app.sim_dir, wiring=app.wiring)
        try:
            return unusable(fresh.host, fact.current(fresh.host, fresh.nvml, keeper=keeper))  # a PF's VFs too
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
    """The agent running the installed remediation policy on health changes, at the latest every ``seconds``
    (0: never)."""
    from .agent import RemedyRunner

    if seconds > 0:  # the policy the applied config installed (none: no events)
        agent.remedy = RemedyRunner(command, root=app.root, sim_dir=app.sim_dir)
        agent.remedy_s = seconds
    return agent


def finish_unhealthy(app: App, inv: Inventory, sick: dict[str, str]) -> None:
    """End ``k8s resources`` with exit 6 naming the first device offered Unhealthy by the health rule
    (``sick``: :func:`health`'s look; a device held outside Kubernetes is Unhealthy too, but no fault),
    and how many more; docs/health.md, "One bad device"."""
    marked = {d.id: why for ds in inv.resources.values() for d in ds if (why := sick.get(d.topo_bdf, sick.get(d.id)))}
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
