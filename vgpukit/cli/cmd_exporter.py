"""``vgpukit exporter``: Prometheus metrics of the host (dcgm-exporter's GPU series, health, tenants,
slices), read afresh at every scrape; ``--once`` prints one scrape."""

from __future__ import annotations

import socket
import sys
from typing import Any

import click

from ..clikit.context import App
from ..clikit.params import Listen
from ..errors import Busy, HostIOError

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
@click.pass_obj
def exporter(app: App, listen: tuple[str, int], once: bool) -> None:
    """Serve Prometheus metrics: GPUs (dcgm-exporter names), health, QoS tenants, slices and holders.

    Every scrape reads the host afresh through the facades (nothing cached). Series: docs/metrics.md.
    """
    from ..metrics.collector import HostCollector, text

    if app.json:  # a scrape is the Prometheus text format, and nothing else
        raise click.UsageError("the exporter writes the Prometheus text format: no --json")
    collector = HostCollector(app.host, lambda: app.nvml)
    if once:
        sys.stdout.write(text(collector))
        _lost(app)
        return
    _serve(collector, *listen)


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
    """One thread: the WSGI server answers each scrape in the foreground, until interrupted."""
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from prometheus_client import CollectorRegistry, make_wsgi_app

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(WSGIServer):
        address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET

    try:
        server = make_server(addr, port, make_wsgi_app(registry), server_class=Server, handler_class=Quiet)
    except OSError as exc:
        if exc.errno == 98:  # EADDRINUSE
            raise Busy(f"port {port} is already in use", hint="another exporter? pick one with --listen") from exc
        raise HostIOError(f"cannot listen on {addr or '*'}:{port}: {exc.strerror}") from exc
    click.echo(f"vgpukit exporter: serving /metrics on {addr or '*'}:{port}", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
