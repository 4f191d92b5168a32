"""The DRA commands of ``vgpukit k8s``: ``dra-plugin`` (the kubelet plugin), ``dra-classes`` (KEP-5004's
DeviceClasses), ``dra-taint-rules`` (DeviceTaintRules for a GPU and its pieces), and ``k8s resources
--kubernetes VERSION``'s view: the ResourceSlices the plugin would publish now for an API server of that
release (:mod:`vgpukit.k8s.dra.cluster`'s rules, :mod:`vgpukit.k8s.dra.pool`'s layout)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ..clikit.context import App
from ..clikit.options import json_option
from ..clikit.output import emit, say, table
from ..clikit.params import NAME, AsciiFloat
from ..clikit.watch import resync_option, start_watch
from ..stopping import Stop
from .cli_host import _dra_opener, _health, _log_to_stderr, _poller
from .cli_options import ShareChoice, device_metadata_option, kubernetes_release, node_name

if TYPE_CHECKING:
    from ..engine.env import Env
    from ..node.inventory import Inventory
    from .dra.capacity import Choice
    from .dra.driver import Driver

Opener = Callable[[], tuple["Env", Callable[..., "Inventory"], Callable[[], None]]]


def _driver(opener: Opener, health: Callable[[], dict[str, str]], version: str, partitionable: str, node: str,
            share: Choice | None = None) -> tuple[Any, Driver]:  # fmt: skip
    """The plugin as it would run against an API server of ``version`` with its gates at their defaults
    (``--partitionable`` auto: the release's), and that server's rules."""
    from .dra import cluster
    from .dra.server import Driver

    server = cluster.for_version(version, None if partitionable == "auto" else partitionable == "on")
    driver = Driver(node, opener, lambda *_: {}, health, "on" if server.partitionable else "off", share=share)
    driver.taints_ok = server.taints  # --device-taints auto: as the release's gate
    driver.capacity.served = server.capacity  # DRAConsumableCapacity as the release has it by default
    return server, driver


def slices_view(
    opener: Opener,
    health: Callable[[], dict[str, str]],
    version: str,
    partitionable: str,
    node: str,
    share: Choice | None = None,
) -> dict[str, Any]:
    """The release's rules and the slices (generation 1, as a first publish writes them), as the plugin
    with ``--partitionable`` (auto: the release's default of ``DRAPartitionableDevices``) and
    ``--share-by-capacity`` would publish; the notes it would log (why a GPU offers less, what it could not
    read)."""
    from .dra import pool
    from .dra.slices import slice_doc

    server, driver = _driver(opener, health, version, partitionable, node, share)
    entries, parts = driver.publication()
    wanted, warnings = pool.layout(node, entries, parts, server)
    docs = [slice_doc(node, name, part, 1, len(wanted)) for name, part in wanted.items()]
    static = ""
    if not server.partitionable:
        static = "--partitionable off" if partitionable == "off" else f"DRAPartitionableDevices off in {server.version}"
    rules = {
        "version": server.version,
        "asked": version,
        "layout": server.layout,
        "partitionable": server.partitionable,
        "staticBecause": static,
        "deviceTaints": server.taints,
        "consumableCapacity": server.capacity,
    }
    notes = [
        *driver.said.values(),
        *sorted(driver.capacity.said),
        *(t for v in driver.told.values() for t in sorted(v)),
    ]
    return {"kubernetes": rules, "resourceSlices": docs, "sliceWarnings": warnings, "sliceNotes": notes}


def show(view: dict[str, Any]) -> None:
    """One row per slice: its name, devices (tainted ones), counter sets; then the notes and warnings."""
    k = view["kubernetes"]
    shape = "counter sets beside devices" if k["layout"] == "combined" else "counter sets in slices of their own"
    gate = "partitionable devices" if k["partitionable"] else f"static view ({k['staticBecause']})"
    from .dra.cluster import newer_than_known

    asked = k["asked"]
    label = f"{asked} (the rules of {k['version']}, the newest known)" if newer_than_known(asked) else asked
    rows = [
        (
            d["metadata"]["name"],
            len(d["spec"].get("devices") or []),
            sum(1 for x in d["spec"].get("devices") or [] if x.get("taints")),
            ", ".join(c["name"] for c in d["spec"].get("sharedCounters") or []),
        )
        for d in view["resourceSlices"]
    ]
    table(
        f"ResourceSlices for Kubernetes {label}: {shape}, {gate}", ["SLICE", "DEVICES", "TAINTED", "COUNTER SETS"], rows
    )
    if view["sliceNotes"]:
        table(None, ["NOTE"], [(line,) for line in view["sliceNotes"]])
    if view["sliceWarnings"]:
        table(None, ["WARNING"], [(line,) for line in view["sliceWarnings"]])


@click.command("dra-plugin")
@click.option(
    "--node",
    "node",
    type=NAME,
    envvar="NODE_NAME",
    required=True,
    callback=node_name,
    help="This node's name (env NODE_NAME).",
)
@click.option(
    "--kubeconfig",
    metavar="FILE",
    help="kubeconfig file (default: the in-cluster service account, else ~/.kube/config).",
)
@click.option(
    "--interval",
    type=AsciiFloat(0.1, 3600),
    metavar="SECONDS",
    default=3600.0,
    show_default=True,
    help="The longest wait before the plugin publishes again when nothing changed (changes wake it at once).",
)
@resync_option
@click.option(
    "--partitionable",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Publish MIG slices and vGPUs made on demand with shared counters (KEP-4815), in the layout of the API "
    "server's release; auto: where the API server keeps counters (feature gate DRAPartitionableDevices, read with "
    "a dry run before the first write); on: the same, an error logged where it does not.",
)
@click.option(
    "--device-taints",
    "taints",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Publish a device the health layer finds unusable with a taint (gpu.vgpukit.io/unhealthy) instead of "
    "leaving it out; auto: unless the API server drops the taints (feature gate DRADeviceTaints off, read with a "
    "dry run before the first write).",
)
@click.option(
    "--unhealthy-effect",
    type=click.Choice(["NoSchedule", "NoExecute"]),
    default=None,
    help="The effect of that taint: NoSchedule (the default: no new claim gets the device) or NoExecute "
    "(Kubernetes also evicts the pods using it). Not with --device-taints off.",
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
    resync: float,
    partitionable: str,
    taints: str,
    unhealthy_effect: str | None,
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

    if taints == "off" and unhealthy_effect is not None:
        raise click.UsageError("--unhealthy-effect is the effect of the taint --device-taints off never publishes")
    from .watched import dra_views

    _log_to_stderr("vgpukit.k8s.dra")
    api = resource_api(kubeconfig)
    stop = Stop().on_signals()  # before the servers: a SIGTERM from then on ends the plugin cleanly
    with start_watch(app, dra_views(), resync) as watch:
        model = watch.model
        sick = lambda: model.get("sick") or {}  # noqa: E731
        driver = Driver(node, _dra_opener(app), ClaimReader(api), sick, partitionable, taints)
        driver.device_metadata = metadata  # KEP-5304 (docs/kubevirt.md)
        driver.unhealthy_effect = unhealthy_effect or "NoSchedule"  # NoExecute: Kubernetes evicts the pods
        driver.evicting = lambda: model.get("evicting") or {}  # drained / remediated: the taint's effect NoExecute
        driver.capacity.choice = share  # shared by capacity
        driver.model = model
        plugin = Plugin(app.host, driver, interval, Publisher(api, node, partitionable)).start()
        say(f"vgpukit DRA plugin: {app.host.display(registry_socket(app.host))}, node {node}, {watch.describe()}")
        try:
            stop.wait()
        finally:
            plugin.close()


def _yaml(docs: list[dict[str, Any]]) -> None:
    import yaml

    click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)


@click.command("dra-classes")
@json_option
@click.pass_obj
def dra_classes(app: App) -> None:
    """Print DeviceClasses mapping this host's device plugin resource names to the DRA driver (KEP-5004).

    One DeviceClass per name the device plugin serves here (vgpukit.io/gpu-share where it has GPUs it
    shares), with spec.extendedResourceName: a pod asking resources.limits for that name is then served
    by the DRA plugin unchanged. Apply the output (kubectl apply -f -) once per kind of node; --json: the
    classes in one document (deviceClasses).
    """
    from .dra.extended import device_classes

    classes = device_classes(_poller(app, 1)())
    if not classes:
        click.echo("vgpukit: no resource name the device plugin serves on this host: no DeviceClass", err=True)
    emit(app, "k8s-dra-classes", {"deviceClasses": classes}, lambda: _yaml(classes))


@click.command("dra-taint-rules")
@click.argument("gpu", type=NAME)
@click.option(
    "--kubernetes",
    "version",
    type=NAME,
    callback=kubernetes_release,
    default="1.37",
    show_default=True,
    metavar="VERSION",
    help="The release whose DeviceTaintRule API the rules use (v1alpha3: 1.34, 1.35; v1beta2: 1.36; v1: 1.37+) "
    "and whose slices the devices are read from.",
)
@click.option(
    "--node",
    "node",
    type=NAME,
    envvar="NODE_NAME",
    default=lambda: socket.gethostname().lower(),
    callback=node_name,
    show_default="env NODE_NAME, else the host name",
    help="The node's name: its pool.",
)
@click.option(
    "--effect",
    type=click.Choice(["NoExecute", "NoSchedule", "None"]),
    default="NoExecute",
    show_default=True,
    help="NoExecute evicts the pods using the devices; NoSchedule keeps new claims off; None (1.35+) is a dry run.",
)
@click.option("--share-by-capacity", "share", type=ShareChoice(), default="off", show_default=True,
              help="As the plugin runs with (the shared devices' names).")  # fmt: skip
@json_option
@click.pass_obj
def dra_taint_rules(app: App, gpu: str, version: str, node: str, effect: str, share: Any) -> None:
    """Print DeviceTaintRules taking GPU and every piece of it out for maintenance (one rule per device).

    A DeviceTaintRule selects one device by name: a GPU is also its MIG slices (existing and made on
    demand), its vGPUs, its shared form. One rule per device the plugin publishes of GPU now, with
    partitionable devices or without (as 'k8s resources --kubernetes' shows them); apply the output
    (kubectl apply -f -), delete it (kubectl delete -f -) to end the maintenance.
    """
    from ..naming import GPU, resolve
    from .dra import taint_rules

    taint_rules.check(version, effect)
    bdf = resolve(app.host, gpu, frozenset({GPU}), nvml=lambda: app.nvml).bdf
    assert bdf is not None
    entries: list[dict[str, Any]] = []
    parts: dict[str, dict[str, Any]] = {}
    offer = None
    for mode in ("on", "off"):  # the devices of either view: whichever the cluster's gate gives
        _server, driver = _driver(_dra_opener(app), _health(app), version, mode, node, share)
        driver.capacity = offer = offer or driver.capacity  # its notes logged once
        more, more_parts = driver.publication()
        entries += more
        parts.update({f"{mode}/{k}": v for k, v in more_parts.items()})
    rules = taint_rules.rules(version, node, bdf, entries, parts, effect)
    emit(app, "k8s-dra-taint-rules", {"gpu": bdf, "deviceTaintRules": rules}, lambda: _yaml(rules))
