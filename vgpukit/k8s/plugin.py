"""The kubelet Device Plugin API v1beta1 server: one gRPC server per resource, on its own Unix socket.

Life cycle, as the kubelet's device manager expects it (k8s.io/kubelet deviceplugin v1beta1):

1. each resource serves ``DevicePlugin`` on ``<kubelet dir>/device-plugins/vgpukit-<resource>.sock``;
2. then calls ``Registration.Register`` on ``kubelet.sock`` in the same directory (version
   ``v1beta1``, the socket's file name, the resource name, ``get_preferred_allocation_available``);
3. the kubelet dials back: ``GetDevicePluginOptions``, then one long ``ListAndWatch`` stream, which
   gets the whole device list again whenever a device appears, goes or changes health;
4. ``GetPreferredAllocation`` at admission, ``Allocate`` before each container starts.

The :class:`Manager` takes the devices from the watch's host model (:mod:`vgpukit.watch`: kernel
uevents, NVML events, inotify) whenever it changes, and looks at ``kubelet.sock`` whenever the
kubelet's directory changes (inotify): when the kubelet restarts it binds a new socket and deletes
the plugins' sockets, so a new socket identity, or a plugin socket gone, makes every plugin serve
anew and register again.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from ..errors import VgpukitError
from ..host import Host
from ..logs import logger
from ..node.inventory import HEALTHY, UNHEALTHY, Device, Inventory, carry_unread, health_of
from ..stopping import Bell, Stop, wait_woken
from ..words import plural
from . import preferred as pref
from .aio import Abort, Context, Loop, Wake, aborting
from .v1beta1 import api_pb2 as api
from .v1beta1 import api_pb2_grpc

log = logger("vgpukit.k8s")

API_VERSION = "v1beta1"
__all__ = ["HEALTHY", "UNHEALTHY", "Manager", "container_response", "plugin_dir"]  # HEALTHY: tests import it here
RECOVER_POLLS = 3  # polls in a row a device must be found usable again before it is Healthy again
RECOVER_WAIT = 1.0  # seconds between those polls when the plugin listens (no change wakes it meanwhile)
RETRY_WAIT = 5.0  # seconds before serving or registering that failed is tried again (when the plugin listens)
KUBELET_SOCKET = "kubelet.sock"
MODES = ("both", "cdi", "devices")  # what Allocate answers: CDI names, device specs/env/mounts, or both
# env variables whose values of several devices are joined with commas: the NVIDIA container runtime's
# selector, and what KubeVirt's virt-launcher reads (PCI addresses, mdev UUIDs: docs/kubevirt.md)
JOINED_ENV = ("NVIDIA_VISIBLE_DEVICES", "PCI_RESOURCE_", "MDEV_PCI_RESOURCE_")
GRPC: Any = api_pb2_grpc  # generated without type annotations (see docs/kubernetes.md)


def plugin_dir(host: Host) -> Path:
    """The kubelet's device plugin directory, under the host root."""
    return host.path("var", "lib", "kubelet", "device-plugins")


def socket_identity(host: Host, path: Path) -> tuple[int, int, int] | None:
    """(device, inode, change time) of a Unix socket (its address contained by the Host door), None
    when absent or not a socket: a kubelet that restarts binds a new ``kubelet.sock``, a new identity."""
    try:
        st = os.stat(host.socket_address(path))
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns) if stat.S_ISSOCK(st.st_mode) else None


def socket_name(resource: str) -> str:
    """``vgpukit.io/mig-3g.20gb`` -> ``vgpukit-mig-3g.20gb.sock``."""
    return "vgpukit-" + resource.rpartition("/")[2] + ".sock"


@dataclass
class State:
    """One resource's devices as the plugin last saw them; ``version`` counts list changes."""

    name: str
    devices: dict[str, Device] = field(default_factory=dict)
    allocated: set[str] = field(default_factory=set)  # handed to containers by Allocate (in use by them)
    version: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)
    stopping: bool = False

    sick: frozenset[str] = frozenset()  # PCI functions the health layer finds unusable (debounced)
    wakes: set[Callable[[], None]] = field(default_factory=set)  # the streams' (ListAndWatch) rings

    def health(self, dev: Device) -> str:
        return health_of(dev, dict.fromkeys(self.sick, ""), self.allocated)[0]

    def listing(self) -> list[tuple[str, str, int | None]]:
        return [(d.id, self.health(d), d.numa) for d in sorted(self.devices.values(), key=lambda d: d.id)]

    def update(self, devices: list[Device], sick: frozenset[str] = frozenset()) -> bool:
        """Take a fresh device list; True (and waiters woken) when what ListAndWatch shows changed."""
        with self.cond:
            before = self.listing()
            self.devices = {d.id: d for d in devices}
            self.sick = sick
            if self.listing() == before:
                return False
            self.version += 1
            self.cond.notify_all()
            wakes = list(self.wakes)
        for wake in wakes:
            wake()
        return True

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
            wakes = list(self.wakes)
        for wake in wakes:
            wake()


def _response(listing: list[tuple[str, str, int | None]]) -> api.ListAndWatchResponse:
    return api.ListAndWatchResponse(
        devices=[
            api.Device(ID=i, health=h, topology=api.TopologyInfo(nodes=[api.NUMANode(ID=n)]) if n is not None else None)
            for i, h, n in listing
        ]
    )


class Servicer:
    """The ``DevicePlugin`` service of one resource (registered by name on its ``grpc.aio`` server): async
    handlers on the process's loop; the blocking ones in its executor."""

    def __init__(self, state: State, inventory: Callable[[], Inventory], mode: str, loop: Loop) -> None:
        self.state = state
        self.inventory = inventory
        self.mode = mode
        self.loop = loop

    async def GetDevicePluginOptions(self, request: api.Empty, context: Context) -> api.DevicePluginOptions:
        return api.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    async def ListAndWatch(self, request: api.Empty, context: Context) -> AsyncIterator[api.ListAndWatchResponse]:
        """The list, then again whenever it changes; awaits the manager's ring (no timer looks). The kubelet's
        cancel raises CancelledError at the await: the stream ends, its ring is let go."""
        state, seen, wake = self.state, -1, Wake()
        with state.cond:
            state.wakes.add(wake.ring)
        try:
            while True:
                wake.clear()  # a change from here on rings the wait below
                with state.cond:
                    if state.stopping:
                        return
                    fresh = state.version != seen
                    seen, listing = state.version, state.listing() if fresh else []
                if fresh:
                    yield _response(listing)
                else:
                    await wake.wait()
        finally:
            with state.cond:
                state.wakes.discard(wake.ring)

    async def Allocate(self, request: api.AllocateRequest, context: Context) -> api.AllocateResponse:
        return await aborting(context, self.loop.blocking(self.allocate, request))

    def allocate(self, request: api.AllocateRequest) -> api.AllocateResponse:
        out = api.AllocateResponse()
        with self.state.cond:
            known = dict(self.state.devices)
        for creq in request.container_requests:
            unknown = [i for i in creq.devices_ids if i not in known]
            if unknown:
                raise Abort(grpc.StatusCode.NOT_FOUND, f"{self.state.name}: no device {', '.join(unknown)[:200]}")
            out.container_responses.append(self.container(known[i] for i in creq.devices_ids))
            with self.state.cond:
                self.state.allocated.update(creq.devices_ids)
        return out

    def container(self, devices: Iterator[Device]) -> api.ContainerAllocateResponse:
        return container_response(devices, self.mode)

    async def GetPreferredAllocation(
        self, request: api.PreferredAllocationRequest, context: Context
    ) -> api.PreferredAllocationResponse:
        return await self.loop.blocking(self.preferred, request)

    def preferred(self, request: api.PreferredAllocationRequest) -> api.PreferredAllocationResponse:
        with self.state.cond:
            devices = list(self.state.devices.values())
        dist = pref.Distances(devices, self.inventory().pci)
        out = api.PreferredAllocationResponse()
        for creq in request.container_requests:
            ids = pref.preferred(creq.available_deviceIDs, creq.must_include_deviceIDs, creq.allocation_size, dist)
            out.container_responses.append(api.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return out

    async def PreStartContainer(
        self, request: api.PreStartContainerRequest, context: Context
    ) -> api.PreStartContainerResponse:
        return api.PreStartContainerResponse()


def container_response(devices: Iterator[Device], mode: str) -> api.ContainerAllocateResponse:
    """What ``Allocate`` answers for one container given ``devices`` (``mode``: :data:`MODES`); ``vgpukit k8s
    allocate`` shows the same answer without a kubelet."""
    resp = api.ContainerAllocateResponse()
    nodes: dict[str, str] = {}
    joined: dict[str, list[str]] = {}
    for dev in devices:
        if dev.cdi_name and mode != "devices":
            resp.cdi_devices.append(api.CDIDevice(name=dev.cdi_name))
        if dev.cdi_name and mode == "cdi":
            continue
        for n in dev.nodes:
            nodes.setdefault(n, "rw")
        for kv in dev.env:
            key, _, value = kv.partition("=")
            if key.startswith(JOINED_ENV):
                joined.setdefault(key, []).append(value)
            else:
                resp.envs[key] = value
        for m in dev.mounts:
            mount = api.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            resp.mounts.append(mount)
    for key, values in joined.items():
        resp.envs[key] = ",".join(dict.fromkeys(values))
    for path, perms in nodes.items():
        resp.devices.append(api.DeviceSpec(container_path=path, host_path=path, permissions=perms))
    return resp


class ResourcePlugin:
    """One resource: its state, its gRPC server on its socket, its registration with the kubelet."""

    def __init__(self, host: Host, name: str, inventory: Callable[[], Inventory], mode: str, loop: Loop) -> None:
        self.host = host
        self.loop = loop
        self.state = State(name)
        self.servicer = Servicer(self.state, inventory, mode, loop)
        self.socket = plugin_dir(host) / socket_name(name)
        self.server: grpc.aio.Server | None = None
        self.registered_with: tuple[int, int, int] | None = None  # kubelet.sock identity at registration

    def serve(self) -> None:
        self.close()
        self.host.mkdir(self.socket.parent)
        self.host.remove(self.socket)  # a stale socket from an earlier run
        self.state.stopping = False
        address = "unix://" + self.host.socket_address(self.socket)
        try:
            self.server = self.loop.server(partial(GRPC.add_DevicePluginServicer_to_server, self.servicer), [address])
        except OSError as err:  # grpc's "failed to bind": reported, tried again at the next poll
            raise OSError(f"cannot serve on {self.host.display(self.socket)}") from err
        self.registered_with = None

    def register(self, kubelet: tuple[int, int, int]) -> None:
        path = self.host.socket_address(plugin_dir(self.host) / KUBELET_SOCKET)
        with grpc.insecure_channel("unix://" + path) as channel:
            GRPC.RegistrationStub(channel).Register(
                api.RegisterRequest(
                    version=API_VERSION,
                    endpoint=self.socket.name,
                    resource_name=self.state.name,
                    options=api.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=5.0,
            )
        self.registered_with = kubelet
        log.info("registered %s with the kubelet", self.state.name)

    def socket_gone(self) -> bool:
        return socket_identity(self.host, self.socket) is None

    def close(self) -> None:
        self.state.stop()
        if self.server is not None:
            self.loop.stop(self.server)  # bounded: never kept up by a stuck handler
            self.server = None


class Manager:
    """Every resource's plugin, kept in step with the host and the kubelet."""

    def __init__(
        self,
        host: Host,
        collect: Callable[[], Inventory],
        mode: str = "both",
        health: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self.host = host
        self.collect = collect
        self.mode = mode
        self.health = health  # BDF -> why, of the devices the health layer finds unusable
        self.sick: dict[str, int] = {}  # unusable BDF -> healthy polls since (recovered at RECOVER_POLLS)
        self.unsettled = False  # a plugin not served, or not registered with the kubelet there: tried again soon
        self.plugins: dict[str, ResourcePlugin] = {}
        self.last = Inventory()
        self.lock = threading.Lock()
        self.loop: Loop | None = None  # every resource's server on one event loop, started at the first

    def _loop(self) -> Loop:
        if self.loop is None:
            self.loop = Loop("vgpukit-dp")
        return self.loop

    def inventory(self) -> Inventory:
        with self.lock:
            return self.last

    def poll(self) -> list[str]:
        """Read the host, update every plugin's list, (re)serve and (re)register; the events, for logs."""
        events: list[str] = []
        sick = self._health(events)
        failed = None
        try:  # a lost GPU's devices are kept from the last read, marked below; the rest follows the host
            inv = carry_unread(self.last, self.collect())
        except VgpukitError as err:
            if self.health is None:
                raise
            inv, failed = self.last, err
        with self.lock:
            self.last = inv
        for name in sorted(set(inv.resources) | set(self.plugins)):
            plugin = self.plugins.get(name)
            if plugin is None:
                plugin = self.plugins[name] = ResourcePlugin(self.host, name, self.inventory, self.mode, self._loop())
                events.append(self._serve(plugin, f"serving {name}"))
            if plugin.state.update(inv.resources.get(name, []), sick):
                events.append(f"{name}: {plural(len(plugin.state.devices), 'device')}")
        kubelet = socket_identity(self.host, plugin_dir(self.host) / KUBELET_SOCKET)
        self.unsettled = False
        for name, plugin in sorted(self.plugins.items()):
            if plugin.socket_gone():  # the kubelet restarted and cleared the directory (or serving failed)
                events.append(self._serve(plugin, f"serving {name} again"))
            if kubelet is not None and plugin.server is not None and plugin.registered_with != kubelet:
                try:
                    plugin.register(kubelet)
                    events.append(f"registered {name}")
                except (grpc.RpcError, VgpukitError) as err:
                    events.append(f"{name}: registration failed: {_rpc_error(err)}")
            self.unsettled |= plugin.server is None or (kubelet is not None and plugin.registered_with != kubelet)
        if failed is not None:
            events.append(f"reading the host failed (devices unchanged): {failed}")
        return events

    def _health(self, events: list[str]) -> frozenset[str]:
        """The unusable functions, debounced: unhealthy at once, healthy again after RECOVER_POLLS
        polls in a row that find it usable (a device flapping is kept out of scheduling)."""
        if self.health is None:
            return frozenset()
        try:
            bad = self.health()
        except VgpukitError as err:
            events.append(f"health check failed (health unchanged): {err}")
            return frozenset(self.sick)
        for bdf, why in sorted(bad.items()):
            if bdf not in self.sick:
                events.append(f"{bdf} unhealthy: {why}")
            self.sick[bdf] = 0
        for bdf in [b for b in self.sick if b not in bad]:
            self.sick[bdf] += 1
            if self.sick[bdf] >= RECOVER_POLLS:
                del self.sick[bdf]
                events.append(f"{bdf} healthy again")
        return frozenset(self.sick)

    def _serve(self, plugin: ResourcePlugin, done: str) -> str:
        try:
            plugin.serve()
        except (OSError, VgpukitError) as err:
            return f"{plugin.state.name}: {err}"
        return done

    def run(
        self,
        stop: Stop,
        interval: float,
        on_event: Callable[[str], None] = log.info,
        woken: Bell | None = None,
    ) -> None:
        """Poll, then wait ``interval`` seconds; with ``woken`` (rung by the watch when the host model or the
        kubelet's directory changed) until it rings instead, or ``interval`` passed (a device coming back
        to health is looked at every RECOVER_WAIT seconds until it is Healthy again)."""
        try:
            while not stop.is_set():
                try:
                    events = self.poll()
                except VgpukitError as err:  # a bad QoS config, a host read that failed: keep serving
                    events = [f"reading the host failed (devices unchanged): {err}"]
                for event in events:
                    on_event(event)
                if woken is None:
                    stop.wait(interval)
                else:  # a device recovering, a plugin not served or registered: looked at again soon
                    recovering = any(self.sick.values())  # found usable again, not yet RECOVER_POLLS times
                    soon = RECOVER_WAIT if recovering else RETRY_WAIT if self.unsettled else interval
                    wait_woken(stop, woken, min(interval, soon))
        finally:
            self.close()

    def close(self) -> None:
        for plugin in self.plugins.values():
            plugin.close()
            self.host.remove(plugin.socket)
        if self.loop is not None:
            self.loop.close()
            self.loop = None


def _rpc_error(err: Exception) -> str:
    if isinstance(err, grpc.RpcError):
        code, details = getattr(err, "code", lambda: None)(), getattr(err, "details", lambda: "")()
        return f"{code.name if code else 'error'}: {details}"[:200]
    return str(err)
