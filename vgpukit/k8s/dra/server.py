"""The DRA kubelet plugin: plugin registration, ``DRAPlugin`` v1 and ``DRAResourceHealth`` v1 over Unix sockets.

Life cycle, as the kubelet's plugin manager expects it (k8s.io/kubelet pluginregistration v1, dra v1):

1. ``DRAPlugin`` and ``DRAResourceHealth`` are served on ``<kubelet dir>/plugins/gpu.vgpukit.io/dra.sock``;
2. ``Registration`` on ``<kubelet dir>/plugins_registry/gpu.vgpukit.io-reg.sock``: the kubelet watches
   that directory, calls ``GetInfo`` (type ``DRAPlugin``, the driver name, the DRA socket's path,
   ``v1.DRAPlugin`` and ``v1beta1.DRAPlugin``, for kubelets before 1.34), dials the DRA socket and
   tells the outcome with ``NotifyRegistrationStatus``;
3. before a pod's containers start, ``NodePrepareResources`` names its claims (namespace, name, UID):
   the plugin reads each claim's allocation from the API server and answers CDI device names;
   ``NodeUnprepareResources`` after the pod is gone. The work is :mod:`.claims`'.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from ...errors import VgpukitError
from ...host import Host
from ...logs import logger
from ..aio import Context, Loop, Wake
from ..dra_v1 import api_pb2 as dra
from ..dra_v1 import api_pb2_grpc as dra_grpc
from ..dra_v1beta1 import api_pb2 as dra_beta
from ..dra_v1beta1 import api_pb2_grpc as dra_beta_grpc
from ..drahealth_v1 import api_pb2 as hl
from ..drahealth_v1 import api_pb2_grpc as hl_grpc
from ..pluginreg_v1 import api_pb2 as reg
from ..pluginreg_v1 import api_pb2_grpc as reg_grpc
from . import slices
from .devices import DRIVER
from .driver import ClaimReader as ClaimReader
from .driver import Collect as Collect
from .driver import Driver as Driver
from .driver import Opener as Opener

log = logger("vgpukit.k8s.dra")

SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # the DRA API versions served (GetInfo's supported_versions)
HEALTH_TIMEOUT = 30  # seconds the kubelet waits for a new health report before a device is UNKNOWN
RETRY = 5.0  # seconds before a publication that failed (the API server away) is tried again
DRA: Any = dra_grpc  # generated without type annotations
DRA_BETA: Any = dra_beta_grpc
HEALTH: Any = hl_grpc
REG: Any = reg_grpc


def registry_socket(host: Host) -> Path:
    return host.path("var", "lib", "kubelet", "plugins_registry", f"{DRIVER}-reg.sock")


def plugin_socket(host: Host) -> Path:
    return host.path("var", "lib", "kubelet", "plugins", DRIVER, "dra.sock")


class Registration:
    def __init__(self, driver: Driver, endpoint: str) -> None:
        self.driver = driver
        self.endpoint = endpoint

    async def GetInfo(self, request: reg.InfoRequest, context: Context) -> reg.PluginInfo:
        return reg.PluginInfo(type="DRAPlugin", name=DRIVER, endpoint=self.endpoint, supported_versions=SERVICES)

    async def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: Context
    ) -> reg.RegistrationStatusResponse:
        self.driver.registered, self.driver.registration_error = request.plugin_registered, request.error[:200]
        if request.plugin_registered:
            log.info("registered with the kubelet")
        else:
            log.warning("the kubelet refused the registration: %s", request.error[:200])
        return reg.RegistrationStatusResponse()


class NodeService:
    """``DRAPlugin`` of one API version: ``pb`` is its generated module (v1, v1beta1: the same messages,
    field for field, so an answer is carried over by its wire form). Preparing and unpreparing (the
    engine, the host lock) run in the loop's executor."""

    def __init__(self, driver: Driver, loop: Loop, pb: Any = dra) -> None:
        self.driver = driver
        self.loop = loop
        self.pb = pb

    async def NodePrepareResources(self, request: Any, context: Context) -> Any:
        return await self.loop.blocking(self.prepare, request)

    async def NodeUnprepareResources(self, request: Any, context: Context) -> Any:
        return await self.loop.blocking(self.unprepare, request)

    def prepare(self, request: Any) -> Any:
        out = self.pb.NodePrepareResourcesResponse()
        for claim in request.claims:
            out.claims[claim.uid].ParseFromString(self.driver.prepare(claim).SerializeToString())
        return out

    def unprepare(self, request: Any) -> Any:
        out = self.pb.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            out.claims[claim.uid].ParseFromString(self.driver.unprepare(claim).SerializeToString())
        return out


class HealthService:
    def __init__(self, driver: Driver, interval: float, stop: threading.Event, loop: Loop) -> None:
        self.driver = driver
        self.interval = interval
        self.stop = stop
        self.loop = loop

    async def NodeWatchResources(
        self, request: hl.NodeWatchResourcesRequest, context: Context
    ) -> AsyncIterator[hl.NodeWatchResourcesResponse]:
        """The whole list at once, then again whenever a device's health changes (and every
        HEALTH_TIMEOUT/2 seconds, so the kubelet never times a healthy device out). Awaits the watch's ring
        (its model changed, or the plugin stops); the kubelet's cancel ends it (CancelledError)."""
        last: list[tuple[str, int, str]] | None = None
        sent = 0.0
        wake = Wake()
        self.driver.listen(wake.ring)
        try:
            while not self.stop.is_set():
                wake.clear()  # a change while this look runs is looked at again at once
                try:
                    now = await self.loop.blocking(self.driver.health_report)
                except VgpukitError as err:
                    log.warning("reading the host failed: %s", err)
                    now = last or []
                if now != last or time.monotonic() - sent >= HEALTH_TIMEOUT / 2:
                    stamp = int(time.time())
                    yield hl.NodeWatchResourcesResponse(
                        devices=[
                            hl.DeviceHealth(
                                device=hl.DeviceIdentifier(pool_name=self.driver.pool, device_name=name),
                                health=status,  # type: ignore[arg-type]
                                last_updated_time=stamp,
                                health_check_timeout_seconds=HEALTH_TIMEOUT,
                                message=why,
                            )
                            for name, status, why in now
                        ]
                    )
                    last, sent = now, time.monotonic()
                resend = sent + HEALTH_TIMEOUT / 2 - time.monotonic()
                if not self.stop.is_set():
                    await wake.wait(max(0.0, min(self.interval, resend)))
        finally:
            self.driver.unlisten(wake.ring)


class Plugin:
    """Both servers: the DRA socket and the registration socket (stale sockets of a previous run removed)."""

    def __init__(
        self, host: Host, driver: Driver, interval: float = 5.0, publisher: slices.Publisher | None = None
    ) -> None:
        self.host = host
        self.driver = driver
        self.publisher = publisher
        self.stop = threading.Event()
        self.servers: list[grpc.aio.Server] = []
        self.interval = interval
        self.loop = Loop("vgpukit-dra", workers=8)  # the one event loop: every socket's server (vgpukit.k8s.aio)

    def _serve(self, paths: list[Path], add: Callable[[grpc.aio.Server], None]) -> None:
        """One ``grpc.aio`` server on every socket of ``paths``, on the plugin's event loop."""
        for path in paths:
            self.host.mkdir(path.parent)
            self.host.remove(path)
        try:
            server = self.loop.server(add, ["unix://" + self.host.socket_address(path) for path in paths])
        except OSError as err:
            raise OSError(f"cannot serve on {', '.join(self.host.display(p) for p in paths)}") from err
        self.servers.append(server)

    def start(self) -> Plugin:
        dra_sock, reg_sock = plugin_socket(self.host), registry_socket(self.host)
        registration = Registration(self.driver, self.host.display(dra_sock))

        loop = self.loop

        def services(server: grpc.aio.Server) -> None:  # the kubelet asks the registration socket for
            REG.add_RegistrationServicer_to_server(registration, server)  # Registration only, the other for DRA
            DRA.add_DRAPluginServicer_to_server(NodeService(self.driver, loop), server)
            DRA_BETA.add_DRAPluginServicer_to_server(NodeService(self.driver, loop, dra_beta), server)
            health = HealthService(self.driver, self.interval, self.stop, loop)
            HEALTH.add_DRAResourceHealthServicer_to_server(health, server)

        self._serve([dra_sock, reg_sock], services)
        if self.publisher is not None:
            threading.Thread(target=self._publish, args=(self.publisher,), daemon=True, name="vgpukit-dra-pub").start()
        return self

    def _served(self, publisher: slices.Publisher) -> None:
        """What the API server serves, found out before the first write (:mod:`.cluster`: its version and dry
        runs), taken into the driver: partitionable devices where it keeps counters (``--partitionable on``
        where it does not: an error, the static view published), taints and consumable capacity where it
        keeps them."""
        driver = self.driver
        publisher.features = driver.taints != "off" or bool(driver.capacity.choice)
        server = publisher.detected()
        if driver.partitionable != "off" and driver.counters_ok != server.partitionable:
            driver.counters_ok = server.partitionable
            if not server.partitionable and driver.partitionable == "on":
                log.error(
                    "--partitionable on, but the API server drops shared counters (%s): publishing existing "
                    "devices only, nothing made on demand; turn the feature gate on, or use --partitionable auto",
                    server.describe(),
                )
            elif not server.partitionable:
                log.warning("publishing existing devices only, nothing made on demand (%s)", server.describe())
        if server.kept_taints is False and driver.taints == "auto" and driver.taints_ok:
            driver.taints_ok = False
            log.warning("the API server does not keep device taints (%s): unusable devices left out", server.describe())
        elif server.kept_taints is False and driver.taints == "on" and "taints" not in driver.warned:
            driver.warned.add("taints")
            log.error("--device-taints on, but the API server drops device taints (%s)", server.describe())
        if server.kept_capacity is False and driver.capacity.choice and driver.capacity.served:
            driver.capacity.served = False
            log.warning(
                "the API server does not keep consumable capacity (%s): the devices of --share-by-capacity are "
                "published exclusively",
                server.describe(),
            )

    def _publish(self, publisher: slices.Publisher) -> None:
        """Keep the ResourceSlices current; a failure is logged and tried again at the next poll. What the
        API server serves is found out before the first write (:mod:`.cluster`): with ``--partitionable
        auto``, partitionable devices are published where it keeps counters, the static view elsewhere."""
        while not self.stop.is_set():
            failed = True  # until published: tried again after RETRY seconds, changes or not
            seen = self.driver.version()  # a change while this publication runs is published next, at once
            try:
                self._served(publisher)
                done = publisher.publish(*self.driver.publication())
                if done:
                    log.info("%s", done)
                if publisher.counters_dropped and self.driver.partitionable != "off" and self.driver.counters_ok:
                    publisher.counters_dropped = False
                    publisher.server = None  # its gate changed since it was read: read it again
                    log.warning("the API server dropped the shared counters: reading what it serves again")
                    continue
                if publisher.capacity_dropped and self.driver.capacity.served:
                    self.driver.capacity.served = False  # the cluster does not serve it: devices exclusive
                    log.warning(
                        "the API server dropped the consumable capacity of the shared devices (feature gate "
                        "DRAConsumableCapacity off?): publishing them exclusively instead"
                    )
                    continue
                if publisher.taints_dropped and self.driver.taints == "auto" and self.driver.taints_ok:
                    self.driver.taints_ok = False  # the cluster does not serve them: unusable devices left out
                    log.warning(
                        "the API server dropped the device taints (feature gate DRADeviceTaints off?): "
                        "leaving unusable devices out of the slices instead"
                    )
                    continue
                failed = False
            except VgpukitError as err:
                log.warning("publishing the ResourceSlice failed (tried again): %s", err)
            except Exception as err:  # never end publishing silently: the device list would go stale
                log.warning("publishing the ResourceSlice failed (tried again): %s: %s", type(err).__name__, err)
            self.driver.wait_change(self.stop, min(self.interval, RETRY) if failed else self.interval, seen)

    def close(self) -> None:
        self.stop.set()
        self.driver.nudge()
        for server in self.servers:
            self.loop.stop(server)  # bounded: a handler that never returns must not keep the plugin up
        self.servers.clear()
        self.loop.close()
        for path in (registry_socket(self.host), plugin_socket(self.host)):
            self.host.remove(path)
