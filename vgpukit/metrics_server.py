"""The one metrics server: ``GET /metrics`` of a Prometheus registry over HTTP, for the exporter and the
QoS daemon (``qos daemon --metrics-port``).

prometheus_client's WSGI app behind the standard library's WSGI server, answered one request at a time
by whoever waits on it: :meth:`MetricsServer.serve` blocks in one ``poll`` on the listening socket
and the process's :class:`~vgpukit.stopping.Stop` (no timeout: an idle server wakes for nothing), in
the foreground (the exporter) or in a thread of its own (the QoS daemon, whose loop keeps its slices).
A port in use is :class:`~vgpukit.errors.Busy` (exit 4) naming the port; another bind failure a
:class:`~vgpukit.errors.HostIOError`.
"""

from __future__ import annotations

import errno
import socket
import threading
from typing import TYPE_CHECKING, Any

from .errors import Busy, HostIOError
from .stopping import readable

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry

    from .stopping import Stop


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, addr: str, port: int, hint: str = "") -> None:
        from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

        from prometheus_client import make_wsgi_app

        class Quiet(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(WSGIServer):
            address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET

        try:
            self.server: WSGIServer = make_server(
                addr, port, make_wsgi_app(registry), server_class=Server, handler_class=Quiet
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise Busy(f"port {port} is already in use", hint=hint or None) from exc
            raise HostIOError(f"cannot listen on {addr or '*'}:{port}: {exc.strerror}") from exc
        self.where = f"{addr or '*'}:{port}"

    def fileno(self) -> int:
        return self.server.fileno()

    def serve(self, stop: Stop) -> None:
        """Answer each scrape until ``stop`` is set, then close."""
        stopped = stop.waiter()  # its own pipe: the main loop keeps the bytes of the signals that do not stop
        try:
            while not stop.is_set():
                fds: list[Any] = [self, stopped]
                ready = readable(fds, None)
                if self in ready:
                    self.server.handle_request()
        finally:
            self.server.server_close()

    def serve_in_thread(self, stop: Stop) -> threading.Thread:
        thread = threading.Thread(target=self.serve, args=(stop,), daemon=True, name="vgpukit-metrics")
        thread.start()
        return thread
