"""``vgpukit exporter``: Prometheus metrics of the host (dcgm-exporter's GPU series, health, tenants,
slices): the devices and their health kept by the watch, the rest read at every scrape; ``--once``
prints one scrape (read afresh)."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..clikit.context import App
from ..clikit.params import Listen
from ..clikit.watch import resync_option, start_watch

DEFAULT_LISTEN = ":9401"  # dcgm-exporter's 9400 is left to it: both may run on one host


@click.command("exporter")
@click.option(
    "--listen",
    type=Listen(),
    default=DEFAULT_LISTEN,
    show_default=True,
    help="ADDR:PORT to serve /metrics on (:PORT: every address; [::1]:PORT for IPv6).",
)
@click.option("--once", is_flag=True, help="Print one scrape (text exposition format) to stdout and exit.")
@resync_option
@click.pass_obj
def exporter(app: App, listen: tuple[str, int], once: bool, resync: float) -> None:
    """Serve Prometheus metrics: GPUs (dcgm-exporter names), health, QoS tenants, slices and holders.

    The devices and their health are kept current by listening for changes (docs/engine.md, "The watch");
    telemetry, holders, QoS and CUDA usage are read at each scrape. Series: docs/metrics.md.
    """
    from ..metrics.collector import HostCollector, text

    if app.json:  # a scrape is the Prometheus text format, and nothing else
        raise click.UsageError("the exporter writes the Prometheus text format: no --json")
    if once:
        sys.stdout.write(text(HostCollector(app.host, lambda: app.nvml)))
        _lost(app)
        return
    from ..health.watched import health_views
    from ..node.inventory import Options
    from ..node.views import inventory_views

    views = {**inventory_views(lambda _host: Options(replicas=0)), **health_views(save=False)}
    views.pop("held")  # holders are read at each scrape
    with start_watch(app, views, resync) as watch:
        _serve(HostCollector(app.host, lambda: app.nvml, watch.model), *listen)


def _lost(app: App) -> None:
    """A scrape shows a GPU NVML cannot answer for by its health series only: --once exits 6 naming it."""
    from ..clikit.output import finish_read
    from ..naming import aliases
    from ..partial import lost_gpus
    from ..pci import Scan

    nvml = app.nvml
    gpus = nvml.gpus() if nvml is not None else []
    if any(g.lost for g in gpus):
        finish_read(app, lost_gpus(gpus, aliases(Scan(app.host))))


def _serve(collector: Any, addr: str, port: int) -> None:
    """One thread: the metrics server answers each scrape in the foreground, until SIGTERM or SIGINT."""
    from prometheus_client import CollectorRegistry

    from ..metrics_server import MetricsServer
    from ..stopping import Stop

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server = MetricsServer(registry, addr, port, hint="another exporter? pick one with --listen")
    click.echo(f"vgpukit exporter: serving /metrics on {server.where}", err=True)
    # SIGTERM and SIGINT set a flag and write a byte (never an exception in the middle of a scrape, which
    # the WSGI handler would answer as an error and go on); the poll wakes whichever thread got it
    server.serve(Stop().on_signals())
