"""``vgpukit k8s``: the Kubernetes front ends (device plugin, node labels, config agent)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import json_option
from ..clikit.output import emit, finish_read, say, table
from ..clikit.params import NAME, AsciiFloat
from ..clikit.watch import resync_option, start_watch
from ..partial import as_json
from ..stopping import Bell, Stop
from .cli_health import finish_unhealthy, remediate_every_option, with_remediation
from .cli_host import _dra_opener, _health, _log, _options, _poller
from .cli_options import ShareChoice, kubernetes_release, node_name, replicas_option, vm_mode, vm_options

if TYPE_CHECKING:
    from .dra.capacity import Choice


@click.group(
    cls=LazyGroup,
    lazy={
        "labels": ("vgpukit.k8s.cli_labels", "labels_cmd", ""),
        "kubevirt-config": ("vgpukit.k8s.cli_kubevirt", "kubevirt_config", ""),
        "dra-plugin": ("vgpukit.k8s.cli_dra", "dra_plugin", ""),
        "dra-classes": ("vgpukit.k8s.cli_dra", "dra_classes", ""),
        "dra-taint-rules": ("vgpukit.k8s.cli_dra", "dra_taint_rules", ""),
        "allocate": ("vgpukit.k8s.cli_allocate", "allocate_cmd", ""),
    },
)
def k8s() -> None:
    """Kubernetes: device plugin (kubelet API v1beta1, CDI), NFD node labels, config agent."""


def _default_node() -> str:
    """``NODE_NAME``, else the host name (as the plugin's manifest sets it, as a node is named by default)."""
    import os

    return os.environ.get("NODE_NAME") or socket.gethostname().lower()


@k8s.command("resources")
@replicas_option
@click.option(
    "--kubernetes",
    "version",
    type=NAME,
    callback=kubernetes_release,
    metavar="VERSION",
    help="Also show the ResourceSlices the DRA plugin would publish now for an API server of that release "
    "(1.34, 1.35, 1.36, 1.37; a later one follows the newest known).",
)
@click.option(
    "--partitionable",
    type=click.Choice(["auto", "on", "off"]),
    default=None,
    help="With --kubernetes: as the plugin's option; auto (the default): the release's default of the "
    "DRAPartitionableDevices gate.",
)
@click.option(
    "--share-by-capacity",
    "share",
    type=ShareChoice(),
    default=None,
    metavar="DEVICES",
    help="With --kubernetes: as the plugin's option (where the release's DRAConsumableCapacity gate is on by "
    "default: 1.36 and later).",
)
@click.option(
    "--node",
    "node",
    type=NAME,
    callback=node_name,
    help="With --kubernetes: the node's name (its pool and slice names); default: env NODE_NAME, else the host name.",
)
@vm_options
@json_option
@click.pass_obj
def resources(
    app: App,
    replicas: int,
    version: str | None,
    partitionable: str | None,
    share: Choice | None,
    node: str | None,
    vms: str | None,
) -> None:
    """Show the resources and devices the device plugin would advertise now, with the health it would list
    them with (and the DRA plugin's slices)."""
    from ..node.inventory import health_of

    given = [o for o, v in (("--partitionable", partitionable), ("--share-by-capacity", share), ("--node", node)) if v]
    if version is None and given:
        raise click.UsageError(f"{given[0]} goes with --kubernetes (the DRA plugin's slices for that release)")
    inv = _poller(app, replicas, vms)()
    sick = _health(app)()  # what the running plugin marks Unhealthy, by the same rule (quarantines too)
    view: dict[str, Any] = {}
    if version is not None:
        from .cli_dra import slices_view
        from .dra.capacity import Choice
        from .dra.pool import node_problem

        node = node or _default_node()
        if node_problem(node):
            raise click.BadParameter(f"{node_problem(node)} (the host name {node[:64]!r})", param_hint="'--node'")
        mode, opener = partitionable or "auto", _dra_opener(app)
        view = slices_view(opener, _health(app), version, mode, node, share or Choice())
    listed = [(name, d, *health_of(d, sick)) for name, devices in sorted(inv.resources.items()) for d in devices]

    def doc() -> dict[str, Any]:
        resources: dict[str, list[dict[str, Any]]] = {name: [] for name in sorted(inv.resources)}
        for name, d, state, why in listed:
            entry = {"id": d.id, "numa": d.numa, "cdi": d.cdi_name, "held_by": list(d.held_by), "health": state}
            resources[name].append({**entry, "why": why} if why else entry)
        return {**view, "resources": resources, "warnings": inv.warnings, "unreadable": as_json(inv.unread)}

    def human() -> None:
        rows = [
            (name, d.id, d.numa if d.numa is not None else "-", d.cdi_name or "-", "; ".join(d.held_by) or "-",
             f"{health}: {why}" if why and not d.held_by else health)
            for name, d, health, why in listed
        ]  # fmt: skip
        rows += [("-", u.label, "-", "-", "-", f"not read: {u.reason}") for u in inv.unread]
        table(None, ["RESOURCE", "DEVICE", "NUMA", "CDI", "HELD BY", "HEALTH"], rows)
        for w in inv.warnings:
            sys.stderr.write(f"vgpukit: warning: {w}\n")
        if view:
            from .cli_dra import show

            show(view)

    emit(app, "k8s-resources", doc, human)
    finish_read(app, inv.unread)  # a GPU NVML cannot answer for: nothing of it offered, named, exit 6
    finish_unhealthy(app, inv, sick)  # offered Unhealthy by the health rule (not: held), named, exit 6


@k8s.command("device-plugin")
@replicas_option
@click.option(
    "--interval",
    type=AsciiFloat(0.05, 3600),
    default=3600.0,
    show_default=True,
    metavar="SECONDS",
    help="The longest wait before the plugin looks again when nothing changed (changes wake it at once).",
)
@resync_option
@click.option(
    "--allocate",
    "mode",
    type=click.Choice(["both", "cdi", "devices"]),
    default="both",
    show_default=True,
    help="What Allocate answers: CDI device names (kubelet >= 1.28 with CDI), device specs/env/mounts "
    "(older kubelets), or both.",
)
@vm_options
@click.pass_obj
def device_plugin(app: App, replicas: int, interval: float, resync: float, mode: str, vms: str | None) -> None:
    """Serve the kubelet Device Plugin API v1beta1, one socket and resource per kind of device.

    Runs until SIGTERM/SIGINT; registers with <root>/var/lib/kubelet/device-plugins/kubelet.sock (again on restarts).
    """
    from ..host.notify import CHANGED
    from ..node.inventory import Inventory
    from .plugin import Manager, plugin_dir
    from .watched import device_plugin_views

    allocate = vm_mode(vms, mode)  # a refusal before anything is made or started
    host, woken = app.host, Bell()
    host.mkdir(plugin_dir(host))
    views = device_plugin_views(lambda h: _options(h, replicas), vms)
    with start_watch(app, views, resync, dirs={str(plugin_dir(host)): (CHANGED, "kubelet")}) as watch:
        watch.listeners.append(lambda _touch: woken.ring())
        model = watch.model
        manager = Manager(
            host, lambda: model.get("held") or Inventory(), allocate, health=lambda: model.get("sick") or {}
        )
        stop = Stop().on_signals()
        say(f"vgpukit device plugin: {host.display(plugin_dir(host))}, {watch.describe()}")
        manager.run(stop, interval, on_event=_log, woken=woken)


@k8s.command("node-agent")
@click.option("--node", "node", type=NAME, envvar="NODE_NAME", required=True, help="This node's name (env NODE_NAME).")
@click.option(
    "--config-file",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The fleet file (mounted from a ConfigMap) with the named configs.",
)
@click.option(
    "--kubeconfig",
    metavar="FILE",
    help="kubeconfig file (default: the in-cluster service account, else ~/.kube/config).",
)
@click.option(
    "--apply-command",
    metavar="CMD",
    default="vgpukit",
    show_default=True,
    help="The vgpukit executable that runs 'apply' (with this command's --root/--sim).",
)
@click.option("--once", is_flag=True, help="Act on the node's current label once, then exit.")
@remediate_every_option
@click.pass_obj
def node_agent(
    app: App, node: str, config_file: Path, kubeconfig: str | None, apply_command: str, once: bool, remedy_s: float
) -> None:
    """Apply the named host config that the node label vgpukit.io/config selects.

    Watches this Node; on a new value runs 'vgpukit apply -f FILE -c NAME --json' and reports
    vgpukit.io/config.state (pending, success, failed). Changes that would destroy devices in use
    are refused by apply and reported as failed (the agent drains nothing; it tries again when the
    devices are let go); a busy host is tried again when its lock is released.
    """
    from .agent import Agent, ApplyRunner, api_error, kube_api
    from .agent_host import AgentHost

    runner = ApplyRunner(apply_command, config_file, root=app.root, sim_dir=app.sim_dir)
    api = kube_api(kubeconfig)  # a kubeconfig that cannot be read is refused before anything starts

    def agent_on(host: AgentHost | None) -> Agent:
        agent = Agent(api, node, runner, log=_log, host=host, check=runner.check)
        return with_remediation(agent, app, apply_command, remedy_s)

    if once:
        agent = agent_on(None)
        try:
            agent.reconcile(agent.current_config())
            agent.remediate()
        except Exception as err:
            raise api_error(err) from None
        return
    # lock let go, devices let go; with remediation, health changes too (NVML events)
    with start_watch(app, {}, nvml=remedy_s > 0) as watch:
        agent = agent_on(AgentHost(app.host, watch))
        agent.run(Stop().on_signals())  # the main thread waits in its inbox: told by Stop.then
