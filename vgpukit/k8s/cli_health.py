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
