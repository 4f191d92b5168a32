"""Attach and detach as library calls: the attach planner's steps (:mod:`vgpukit.attach.planner`), run
by the change engine with the caller's libvirt connection.

Order: resolve every DEVICE on the host and check it (exists, IOMMU group viable) before touching
libvirt; then read the domain and every other domain (active and inactive definitions) to find
devices already assigned; the plan is what is missing; apply it device by device; read the
domain back. Each device is a :class:`~vgpukit.attach.steps.DomainDevice` step run by the change
engine: a failure part-way detaches what this run attached (a killed run: the next command), so the
domain is left unchanged.

libvirt's test driver cannot attach devices; there ``--config`` is done by editing the inactive
XML and redefining the domain (one ``defineXML`` per device).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine import Env, execute
from ..host import Host
from ..libvirt.connection import Libvirt
from .devices import AttachTarget
from .planner import Attach, AttachOutcome, Detach, detach_keys, plan_attach, plan_detach, targets_for
from .steps import DomainDevice

if TYPE_CHECKING:
    from ..nvml import Nvml


def run(host: Host, lv: Libvirt, steps: list[DomainDevice], env: Env | None) -> None:
    """Apply, verify, roll back on failure: the change engine, with this command's connection."""
    env = env if env is not None else Env(host)
    env.handles[f"libvirt:{lv.uri}"] = lv
    execute(env, steps)


def attach(
    host: Host,
    lv: Libvirt,
    domain: str,
    names: list[str],
    *,
    nvml: Nvml | None = None,
    dry_run: bool = False,
    live: bool = False,
    config: bool = False,
    mac: str | None = None,
    vlan: int | None = None,
    targets: list[AttachTarget] | None = None,
    env: Env | None = None,
) -> AttachOutcome:
    """Attach ``names`` (or already checked ``targets``) to ``domain``."""
    req = Attach(domain, tuple(names), live, config, mac, vlan)
    if targets is None:
        targets = targets_for(host, names, nvml=nvml, mac=mac, vlan=vlan)
    out = plan_attach(host, lv, req, targets)
    if out.steps and not dry_run:
        run(host, lv, out.steps, env)
    return out


def detach(
    host: Host,
    lv: Libvirt,
    domain: str,
    names: list[str],
    *,
    nvml: Nvml | None = None,
    dry_run: bool = False,
    live: bool = False,
    config: bool = False,
    keys: list[tuple[str, str]] | None = None,
    env: Env | None = None,
) -> AttachOutcome:
    """Detach ``names`` (or already resolved ``keys``) from ``domain``."""
    if keys is None:
        keys = detach_keys(host, names, nvml)
    out = plan_detach(lv, Detach(domain, tuple(names), live, config), keys)
    if out.steps and not dry_run:
        run(host, lv, out.steps, env)
    return out
