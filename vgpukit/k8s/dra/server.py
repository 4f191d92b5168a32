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
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, Protocol

import grpc

from ...engine import session
from ...engine.env import Env
from ...errors import VgpukitError
from ...host import Host
from ...logs import logger
from ..dra_v1 import api_pb2 as dra
from ..dra_v1 import api_pb2_grpc as dra_grpc
from ..dra_v1beta1 import api_pb2 as dra_beta
from ..dra_v1beta1 import api_pb2_grpc as dra_beta_grpc
from ..drahealth_v1 import api_pb2 as hl
from ..drahealth_v1 import api_pb2_grpc as hl_grpc
from ..inventory import Inventory, carry_unread
from ..pluginreg_v1 import api_pb2 as reg
from ..pluginreg_v1 import api_pb2_grpc as reg_grpc
from . import capacity, claims, extended, metadata, ondemand, partitions, slices
from .devices import DRIVER, DraDevice, dra_devices, pci_functions

log = logger("vgpukit.k8s.dra")

SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # the DRA API versions served (GetInfo's supported_versions)
HEALTH_TIMEOUT = 30  # seconds the kubelet waits for a new health report before a device is UNKNOWN
DRA: Any = dra_grpc  # generated without type annotations
DRA_BETA: Any = dra_beta_grpc
HEALTH: Any = hl_grpc
REG: Any = reg_grpc
ClaimReader = Callable[[str, str, str], dict[str, Any]]  # namespace, name, uid -> the ResourceClaim


class Collect(Protocol):
    """The node's inventory now; ``only``: just these PCI functions (with their PFs) read of the bus."""

    def __call__(self, only: frozenset[str] | None = None) -> Inventory: ...


Opener = Callable[[], tuple[Env, Collect, Callable[[], None]]]


def registry_socket(host: Host) -> Path:
    return host.path("var", "lib", "kubelet", "plugins_registry", f"{DRIVER}-reg.sock")


def plugin_socket(host: Host) -> Path:
    return host.path("var", "lib", "kubelet", "plugins", DRIVER, "dra.sock")


class Driver:
    """What the services share: the host (opened afresh per call), the node's pool, one request at a time."""

    def __init__(
        self,
        node: str,
        open_host: Opener,
        read_claim: ClaimReader,
        health: Callable[[], dict[str, str]],
        partitionable: str = "off",
        taints: str = "off",
        unhealthy_effect: str = "NoSchedule",
        share: capacity.Choice | None = None,
        device_metadata: bool = False,
    ):
        self.pool = node
        self.partitionable = partitionable  # auto | on | off: publish made-on-demand MIG slices (.partitions)
        # auto: as the API server serves them, once the publisher has found out (None until then)
        self.counters_ok: bool | None = None if partitionable == "auto" else partitionable == "on"
        self.taints = taints  # auto | on | off: publish unusable devices with a taint rather than leave them out
        self.taints_ok = taints != "off"  # auto: until the API server drops the taints
        self.unhealthy_effect = unhealthy_effect  # NoSchedule | NoExecute: the taint of an unusable device
        self.capacity = capacity.Offer(share or capacity.Choice())  # devices shared by capacity (.capacity)
        self.device_metadata = device_metadata  # write each prepared request's metadata file (KEP-5304)
        self.open_host = open_host
        self.read_claim = read_claim
        self.health = health
        self.evicting: Callable[[], dict[str, str]] = dict  # devices whose taint evicts (NoExecute): drained
        self.lock = threading.Lock()
        self.registered: bool | None = None
        self.registration_error = ""
        self.last = (Inventory(), slices.NvmlFacts(None))  # the last good read (a lost GPU fails a read)
        self.said: dict[str, str] = {}  # per GPU, the note on what it offers last logged

    def read(self) -> tuple[Inventory, slices.NvmlFacts]:
        """The inventory and NVML's facts now; where a read fails (a GPU fell off the bus), the last good one."""
        env, collect, close = self.open_host()
        inv, facts = self.last
        try:
            try:  # a lost GPU's devices are kept from the last read (tainted or left out by health)
                inv = carry_unread(inv, collect())
            except VgpukitError as err:
                log.warning("reading the host failed (devices unchanged): %s", err)
            try:
                facts = slices.NvmlFacts(env.nvml)
            except VgpukitError as err:
                log.warning("reading NVML failed (facts unchanged): %s", err)
        finally:
            close()
        self.last = (inv, facts)
        return inv, facts

    def devices(self) -> dict[str, DraDevice]:
        return dra_devices(self.read()[0])

    def slice_entries(self) -> list[dict[str, Any]]:
        """The ResourceSlice's devices now (:mod:`.slices`): usable static devices with their attributes."""
        return self.publication()[0]

    def publication(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """The node's static devices and, where partitionable devices are published, one part per GPU that
        offers MIG slices or vGPUs made on demand (:mod:`.partitions`: its counter set, the devices consuming
        it, the whole GPU among them where MIG mode changes without a reset); the static devices of what
        claims made, and the whole GPUs in a part, are left out of the static ones; each device exclusive or
        shared by capacity (:mod:`.capacity`: a GPU shared so offers no part)."""
        sick = self.health()
        evict = self.evicting() if self.taints_ok else {}  # drained (vgpukit drain): their pods are evicted
        inv, facts = self.read()

        def entry(d: DraDevice) -> dict[str, Any] | None:
            if slices.unusable(d, sick) and not self.taints_ok:
                return None
            e = slices.device_entry(d, inv.pci, facts)
            effect = "NoExecute" if slices.unusable(d, evict) else self.unhealthy_effect
            return slices.taint(e, effect) if slices.unusable(d, sick) else e

        every = dra_devices(inv)
        marked = [e for e in map(entry, slices.offered(every, sick, self.taints_ok)) if e is not None]
        marked = extended.annotate(marked, every)  # KEP-5004 names
        found = partitions.Publication()
        if self.counters_ok:
            env, _collect, close = self.open_host()
            try:
                found = partitions.publication(env, inv.pci, sick, {e["name"]: e for e in marked}, facts)
            except VgpukitError as err:
                log.warning("reading the MIG slices failed (not published): %s", err)
            finally:
                close()
            for bdf, note in found.notes.items():
                if self.said.get(bdf) != note:
                    self.said[bdf] = note
                    log.info("%s", note)
        devices = {n: d for n, d in every.items() if d.device.id not in found.hidden}
        marked = [e for e in marked if e["name"] in devices and e["name"] not in found.moved]
        env, _collect, close = self.open_host()
        try:  # each device exclusive or shared by capacity (.capacity)
            return capacity.arrange(self.capacity, env, devices, marked, found.parts, entry)
        except VgpukitError as err:
            log.warning("reading the claims shared by capacity failed (published exclusively): %s", err)
            return marked, found.parts
        finally:
            close()

    def prepare(self, claim: dra.Claim) -> dra.NodePrepareResourceResponse:
        with self.lock:
            env, collect, close = self.open_host()
            try:
                done = claims.recorded(env, claim.uid)
                if done is None:
                    doc = self.read_claim(claim.namespace, claim.name, claim.uid)
                    results = claims.results_of(doc, self.pool)
                    ref = {"namespace": claim.namespace, "name": claim.name, **metadata.pod_claim(doc)}
                    with session(env):  # the host lock: an interrupted change repaired before the inventory
                        # the inventory of the claim's devices only: its cost follows the claim, not the host
                        names = [capacity.base_name(r.device) or r.device for r in results]
                        offered = capacity.with_shared(
                            dra_devices(collect(only=pci_functions(names))), [r.device for r in results]
                        )
                        done = claims.prepare(env, claim.uid, ref, results, offered, self.device_metadata)
            except VgpukitError as err:
                return dra.NodePrepareResourceResponse(error=str(err)[:1000])
            finally:
                close()
        devices = [
            dra.Device(request_names=p.request_names, pool_name=p.pool, device_name=p.device, cdi_device_ids=p.cdi_ids)
            for p in done
        ]
        for d, p in zip(devices, done, strict=True):
            if p.share_id:  # a share of a device shared by capacity: the allocation's shareID (.shares)
                d.share_id = p.share_id
        return dra.NodePrepareResourceResponse(devices=devices)

    def unprepare(self, claim: dra.Claim) -> dra.NodeUnprepareResourceResponse:
        with self.lock:
            env, _collect, close = self.open_host()
            try:
                claims.unprepare(env, claim.uid)  # under the host lock, an interrupted change repaired first
            except VgpukitError as err:
                return dra.NodeUnprepareResourceResponse(error=str(err)[:1000])
            finally:
                close()
        return dra.NodeUnprepareResourceResponse()

    def health_report(self) -> list[tuple[str, int, str]]:
        """(device, status, message) of every device (and of each made on demand for a claim): UNHEALTHY where
        the health layer finds its PCI function (a MIG slice's, a vGPU's: its GPU's) unusable."""
        try:
            sick = self.health()
        except VgpukitError as err:
            return [(name, hl.UNKNOWN, f"health check failed: {err}"[:1024]) for name in self.devices()]
        why = {name: slices.unusable(dev, sick) for name, dev in self.devices().items()}  # a MIG slice: own, GPU's
        why.update({name: sick.get(gpu, "") for name, gpu in self.made().items()})
        for name in self.capacity.published:  # a shared device: its device's health
            why[name] = why.get(capacity.base_name(name) or name, "")
        out: list[tuple[str, int, str]] = []
        for name, reason in sorted(why.items()):
            out.append((name, hl.UNHEALTHY, reason[:1024]) if reason else (name, hl.HEALTHY, ""))
        return out

    def made(self) -> dict[str, str]:
        """The devices made on demand for prepared claims (by the name the scheduler allocated), with their GPU."""
        env, _collect, close = self.open_host()
        try:
            return {str(m["device"]): str(m["gpu"]) for m in ondemand.all_made(env)}
        finally:
            close()


class Registration:
    def __init__(self, driver: Driver, endpoint: str) -> None:
        self.driver = driver
        self.endpoint = endpoint

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return reg.PluginInfo(type="DRAPlugin", name=DRIVER, endpoint=self.endpoint, supported_versions=SERVICES)

    def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        self.driver.registered, self.driver.registration_error = request.plugin_registered, request.error[:200]
        if request.plugin_registered:
            log.info("registered with the kubelet")
        else:
            log.warning("the kubelet refused the registration: %s", request.error[:200])
        return reg.RegistrationStatusResponse()


class NodeService:
    """``DRAPlugin`` of one API version: ``pb`` is its generated module (v1, v1beta1: the same messages,
    field for field, so an answer is carried over by its wire form)."""

    def __init__(self, driver: Driver, pb: Any = dra) -> None:
        self.driver = driver
        self.pb = pb

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        out = self.pb.NodePrepareResourcesResponse()
        for claim in request.claims:
            out.claims[claim.uid].ParseFromString(self.driver.prepare(claim).SerializeToString())
        return out

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        out = self.pb.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            out.claims[claim.uid].ParseFromString(self.driver.unprepare(claim).SerializeToString())
        return out


class HealthService:
    def __init__(self, driver: Driver, interval: float, stop: threading.Event) -> None:
        self.driver = driver
        self.interval = interval
        self.stop = stop

    def NodeWatchResources(
        self, request: hl.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[hl.NodeWatchResourcesResponse]:
        """The whole list at once, then again whenever a device's health changes (and every
        HEALTH_TIMEOUT/2 seconds, so the kubelet never times a healthy device out)."""
        last: list[tuple[str, int, str]] | None = None
        sent = 0.0
        while context.is_active() and not self.stop.is_set():
            try:
                now = self.driver.health_report()
            except VgpukitError as err:
                log.warning("reading the host failed: %s", err)
                now = last or []
            if now != last or time.monotonic() - sent > HEALTH_TIMEOUT / 2:
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
            self.stop.wait(self.interval)


class Plugin:
    """Both servers: the DRA socket and the registration socket (stale sockets of a previous run removed)."""

    def __init__(
        self, host: Host, driver: Driver, interval: float = 5.0, publisher: slices.Publisher | None = None
    ) -> None:
        self.host = host
        self.driver = driver
        self.publisher = publisher
        self.stop = threading.Event()
        self.servers: list[grpc.Server] = []
        self.interval = interval

    def _serve(self, path: Path, add: Callable[[grpc.Server], None]) -> None:
        self.host.mkdir(path.parent)
        self.host.remove(path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="vgpukit-dra"))
        add(server)
        try:
            server.add_insecure_port("unix://" + self.host.socket_address(path))
        except RuntimeError as err:
            server.stop(None)
            raise OSError(f"cannot serve on {self.host.display(path)}") from err
        server.start()
        self.servers.append(server)

    def start(self) -> Plugin:
        dra_sock, reg_sock = plugin_socket(self.host), registry_socket(self.host)

        def node(server: grpc.Server) -> None:
            DRA.add_DRAPluginServicer_to_server(NodeService(self.driver), server)
            DRA_BETA.add_DRAPluginServicer_to_server(NodeService(self.driver, dra_beta), server)
            HEALTH.add_DRAResourceHealthServicer_to_server(HealthService(self.driver, self.interval, self.stop), server)

        self._serve(dra_sock, node)
        registration = Registration(self.driver, self.host.display(dra_sock))
        self._serve(reg_sock, lambda server: REG.add_RegistrationServicer_to_server(registration, server))
        if self.publisher is not None:
            threading.Thread(target=self._publish, args=(self.publisher,), daemon=True, name="vgpukit-dra-pub").start()
        return self

    def _publish(self, publisher: slices.Publisher) -> None:
        """Keep the ResourceSlices current; a failure is logged and tried again at the next poll. What the
        API server serves is found out before the first write (:mod:`.cluster`): with ``--partitionable
        auto``, partitionable devices are published where it keeps counters, the static view elsewhere."""
        while not self.stop.is_set():
            try:
                server = publisher.detected()
                if self.driver.partitionable == "auto" and self.driver.counters_ok != server.partitionable:
                    self.driver.counters_ok = server.partitionable
                    if not server.partitionable:
                        log.warning("publishing existing devices only, nothing made on demand (%s)", server.describe())
                done = publisher.publish(*self.driver.publication())
                if done:
                    log.info("%s", done)
                if publisher.counters_dropped and self.driver.partitionable == "auto" and self.driver.counters_ok:
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
            except VgpukitError as err:
                log.warning("publishing the ResourceSlice failed (tried again): %s", err)
            except Exception as err:  # never end publishing silently: the device list would go stale
                log.warning("publishing the ResourceSlice failed (tried again): %s: %s", type(err).__name__, err)
            self.stop.wait(self.interval)

    def close(self) -> None:
        self.stop.set()
        for server in self.servers:
            server.stop(grace=0.5).wait(10)  # bounded: a handler that never returns must not keep the plugin up
        self.servers.clear()
        for path in (registry_socket(self.host), plugin_socket(self.host)):
            self.host.remove(path)
