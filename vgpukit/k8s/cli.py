"""``vgpukit k8s``: the Kubernetes front ends (device plugin, node labels, config agent)."""

from __future__ import annotations

import signal
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import json_option
from ..clikit.output import emit, finish_read, say, table
from ..clikit.params import NAME, AsciiFloat
from ..partial import as_json
from .cli_health import evicting, finish_unhealthy, health, remediate_every_option, with_remediation
from .cli_options import ShareChoice, device_metadata_option, replicas_option, vm_mode, vm_options
from .stopping import Stop


def _kubernetes(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A Kubernetes release (``1.35``, ``v1.35.2``) the DRA rules know, or a later one (the newest known's rules)."""
    if value is None:
        return None
    from ..errors import VgpukitError
    from .dra.cluster import release

    try:
        release(value)
    except VgpukitError as err:
        raise click.BadParameter(err.message) from None
    return value


if TYPE_CHECKING:
    from collections.abc import Callable

    from ..engine.env import Env
    from ..host import Host
    from ..nvml import Nvml
    from .inventory import Inventory, Options


@click.group(
    cls=LazyGroup,
    lazy={
        "labels": ("vgpukit.k8s.cli_labels", "labels_cmd", ""),
        "kubevirt-config": ("vgpukit.k8s.cli_kubevirt", "kubevirt_config", ""),
        "allocate": ("vgpukit.k8s.cli_allocate", "allocate_cmd", ""),
    },
)
def k8s() -> None:
    """Kubernetes: device plugin (kubelet API v1beta1, CDI), NFD node labels, config agent."""


def _options(host: Host, replicas: int) -> Options:
    """gpu-share replicas and the QoS daemon's effective config (tenants' shares and memory caps)."""
    from ..qos.planner import offered
    from .inventory import Options

    return Options(replicas=replicas, qos=offered(host))  # not the tenants the daemon dropped


def _poller(app: App, replicas: int, vms: str | None = None) -> Callable[[], Inventory]:
    """Reads the host afresh at every poll (a new App: nothing cached); ``vms``: the KubeVirt mode's naming."""
    from . import inventory, kubevirt

    def open_host() -> tuple[Host, Nvml | None, Callable[[], None]]:
        fresh = App(root=app.root, sim_dir=app.sim_dir, wiring=app.wiring)
        return fresh.host, fresh.nvml, fresh.close

    if vms:
        return kubevirt.Poller(open_host, vms)
    return inventory.Poller(open_host, lambda host: _options(host, replicas))


def _exit(*_: object) -> None:
    raise SystemExit(0)


def _log(line: str) -> None:
    sys.stderr.write(f"vgpukit: {line}\n")
    sys.stderr.flush()


@k8s.command("resources")
@replicas_option
@click.option(
    "--kubernetes",
    "version",
    type=NAME,
    callback=_kubernetes,
    metavar="VERSION",
    help="Also show the ResourceSlices the DRA plugin would publish now for an API server of that release "
    "(1.34, 1.35, 1.36, 1.37; a later one follows the newest known).",
)
@click.option(
    "--partitionable",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="With --kubernetes: as the plugin's option; auto: the release's default of the DRAPartitionableDevices gate.",
)
@click.option(
    "--node",
    "node",
    type=NAME,
    envvar="NODE_NAME",
    default=lambda: socket.gethostname(),
    show_default="env NODE_NAME, else the host name",
    help="With --kubernetes: the node's name (its pool and slice names).",
)
@vm_options
@json_option
@click.pass_obj
def resources(app: App, replicas: int, version: str | None, partitionable: str, node: str, vms: str | None) -> None:
    """Show the resources and devices the device plugin would advertise now, with the health it would list
    them with (and the DRA plugin's slices)."""
    from .inventory import health_of

    inv = _poller(app, replicas, vms)()
    sick = health(app)()  # what the running plugin marks Unhealthy, by the same rule (quarantines too)
    view: dict[str, Any] = {}
    if version is not None:
        from .cli_dra import slices_view

        view = slices_view(_dra_opener(app), health(app), version, partitionable, node)
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
    type=AsciiFloat(0.05, 60),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="How often the host and the kubelet socket are checked (ListAndWatch updates follow within it).",
)
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
def device_plugin(app: App, replicas: int, interval: float, mode: str, vms: str | None) -> None:
    """Serve the kubelet Device Plugin API v1beta1, one socket and resource per kind of device.

    Runs until SIGTERM/SIGINT; registers with <root>/var/lib/kubelet/device-plugins/kubelet.sock and
    again whenever the kubelet restarts.
    """
    from .plugin import Manager, plugin_dir

    host = app.host
    host.mkdir(plugin_dir(host))
    manager = Manager(host, _poller(app, replicas, vms), vm_mode(vms, mode), health=health(app))
    stop = Stop().on_signals()
    say(f"vgpukit device plugin: {host.display(plugin_dir(host))}, polling every {interval:g}s")
    manager.run(stop, interval, on_event=_log)


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
    are refused by apply and reported as failed (the agent drains nothing).
    """
    from .agent import Agent, ApplyRunner, api_error, kube_api

    runner = ApplyRunner(apply_command, config_file, root=app.root, sim_dir=app.sim_dir)
    agent = with_remediation(Agent(kube_api(kubeconfig), node, runner, log=_log), app, apply_command, remedy_s)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # a watch blocks in a read: interrupt it
        signal.signal(sig, _exit)
    if once:
        try:
            agent.reconcile(agent.current_config())
            agent.remediate()
        except Exception as err:
            raise api_error(err) from None
        return
    agent.run(stop)


@k8s.command("dra-plugin")
@click.option("--node", "node", type=NAME, envvar="NODE_NAME", required=True, help="This node's name (env NODE_NAME).")
@click.option(
    "--kubeconfig",
    metavar="FILE",
    help="kubeconfig file (default: the in-cluster service account, else ~/.kube/config).",
)
@click.option(
    "--interval",
    type=AsciiFloat(0.1, 3600),
    metavar="SECONDS",
    default=5.0,
    show_default=True,
    help="How often the host is looked at (the health stream, the ResourceSlice).",
)
@click.option(
    "--partitionable",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Publish MIG slices and vGPUs made on demand with shared counters (KEP-4815), in the layout of the API "
    "server's release; auto: where the API server keeps counters (feature gate DRAPartitionableDevices, read with "
    "a dry run before the first write).",
)
@click.option(
    "--device-taints",
    "taints",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Publish a device the health layer finds unusable with a taint (gpu.vgpukit.io/unhealthy) instead of "
    "leaving it out; auto: unless the API server drops the taints (feature gate DRADeviceTaints off).",
)
@click.option(
    "--unhealthy-effect",
    type=click.Choice(["NoSchedule", "NoExecute"]),
    default="NoSchedule",
    show_default=True,
    help="The effect of that taint: NoSchedule (no new claim gets the device) or NoExecute (Kubernetes also "
    "evicts the pods using it).",
)
@click.option(
    "--share-by-capacity",
    "share",
    type=ShareChoice(),
    default="off",
    show_default=True,
    help="Publish these devices shared by capacity (consumable capacity: memory and computeShare per claim, a QoS "
    "tenant and a CUDA memory cap each): off, or gpu, mig and DRA device names, comma-separated.",
)
@device_metadata_option
@click.pass_obj
def dra_plugin(
    app: App,
    node: str,
    kubeconfig: str | None,
    interval: float,
    partitionable: str,
    taints: str,
    unhealthy_effect: str,
    share: Any,
    metadata: bool,
) -> None:
    """Serve the kubelet's DRA plugin API v1 for driver gpu.vgpukit.io: existing GPUs, MIG slices, VFs, mdevs.

    Publishes the node's ResourceSlices (resource.k8s.io/v1, one pool named after the node) and keeps
    them current; with partitionable devices, a GPU in MIG mode also offers every MIG slice it could
    still hold (a vGPU host: every vGPU), created at prepare and destroyed at unprepare. Runs until SIGTERM/SIGINT; the
    registration socket is <root>/var/lib/kubelet/plugins_registry/gpu.vgpukit.io-reg.sock.
    """
    from .dra.api import ClaimReader, resource_api
    from .dra.server import Driver, Plugin, registry_socket
    from .dra.slices import Publisher

    _log_to_stderr("vgpukit.k8s.dra")
    api = resource_api(kubeconfig)
    driver = Driver(node, _dra_opener(app), ClaimReader(api), health(app), partitionable, taints)
    driver.device_metadata = metadata  # KEP-5304 (docs/kubevirt.md)
    driver.unhealthy_effect, driver.capacity.choice = unhealthy_effect, share  # NoExecute; shared by capacity
    driver.evicting = evicting(app)  # drained / remediated devices: the taint's effect is NoExecute
    stop = Stop().on_signals()  # before the servers: a SIGTERM from then on ends the plugin cleanly
    plugin = Plugin(app.host, driver, interval, Publisher(api, node, partitionable)).start()
    say(f"vgpukit DRA plugin: {app.host.display(registry_socket(app.host))}, node {node}")
    try:
        stop.wait()
    finally:
        plugin.close()


def _log_to_stderr(name: str) -> None:
    """The plugin's events (registration, publishing, failures) as ``vgpukit: ...`` lines on stderr."""
    import logging

    class Say(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            _log(record.getMessage())

    logger = logging.getLogger(name)
    if not any(type(h).__name__ == "Say" for h in logger.handlers):
        logger.addHandler(Say())
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _dra_opener(app: App) -> Callable[[], tuple[Env, Callable[..., Inventory], Callable[[], None]]]:
    """A fresh host, NVML and engine environment for each kubelet call (nothing cached between calls)."""
    from .inventory import Options, collect

    def open_host() -> tuple[Env, Callable[..., Inventory], Callable[[], None]]:
        fresh = App(root=app.root, sim_dir=app.sim_dir, command="vgpukit k8s dra-plugin", wiring=app.wiring)
        env = fresh.env

        def inventory(only: frozenset[str] | None = None) -> Inventory:
            return collect(fresh.host, fresh.nvml, Options(replicas=1), only=only)

        return env, inventory, fresh.close

    return open_host


@k8s.command("dra-classes")
@click.pass_obj
def dra_classes(app: App) -> None:
    """Print DeviceClasses mapping this host's device plugin resource names to the DRA driver (KEP-5004).

    One DeviceClass per name the device plugin serves here (and vgpukit.io/gpu-share, a share of a GPU
    shared by capacity), with spec.extendedResourceName: a pod asking resources.limits for that name is
    then served by the DRA plugin unchanged. Apply the output (kubectl apply -f -) once per kind of node.
    """
    import yaml

    from .dra.extended import device_classes

    inv = _poller(app, 1)()
    click.echo(yaml.safe_dump_all(device_classes(inv), sort_keys=False), nl=False)
