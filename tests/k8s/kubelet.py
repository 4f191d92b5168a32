"""A kubelet-side peer of the Device Plugin API, generated from the same upstream proto.

It does what the kubelet's device manager (pkg/kubelet/cm/devicemanager) does with a plugin:
serves ``Registration`` on ``kubelet.sock``; on ``Register`` checks the version, dials the plugin's
endpoint in the same directory, asks ``GetDevicePluginOptions`` and keeps one ``ListAndWatch``
stream per resource; ``allocate`` asks ``GetPreferredAllocation`` (when the plugin offers it) and
``Allocate``; ``restart`` stops the server, empties the directory as the kubelet does at start and
serves a new ``kubelet.sock``.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from vgpukit.k8s.v1beta1 import api_pb2 as api
from vgpukit.k8s.v1beta1 import api_pb2_grpc as rpc

SUPPORTED = ("v1beta1",)


@dataclass
class Endpoint:
    resource: str
    channel: grpc.Channel
    stub: Any
    options: Any
    devices: dict[str, str] = field(default_factory=dict)  # id -> health
    numa: dict[str, list[int]] = field(default_factory=dict)
    updates: list[tuple[float, dict[str, str]]] = field(default_factory=list)
    stream: Any = None


class Kubelet(rpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.endpoints: dict[str, Endpoint] = {}
        self.registrations: list[str] = []
        self.changed = threading.Condition()
        self.server: grpc.Server | None = None

    # ------------------------------------------------------------------ the kubelet's side
    def Register(self, request: Any, context: Any) -> Any:
        if request.version not in SUPPORTED:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        channel = grpc.insecure_channel("unix://" + str(self.dir / request.endpoint))
        stub = rpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(api.Empty(), timeout=5)
        ep = Endpoint(request.resource_name, channel, stub, options)
        with self.changed:  # stop() may be closing the endpoints while a Register is still in its handler
            old = self.endpoints.get(request.resource_name)
            self.endpoints[request.resource_name] = ep
        if old is not None:
            old.channel.close()
        ep.stream = stub.ListAndWatch(api.Empty())
        threading.Thread(target=self._watch, args=(ep,), daemon=True).start()
        with self.changed:
            self.registrations.append(request.resource_name)
            self.changed.notify_all()
        return api.Empty()

    def _watch(self, ep: Endpoint) -> None:
        try:
            for resp in ep.stream:
                with self.changed:
                    ep.devices = {d.ID: d.health for d in resp.devices}
                    ep.numa = {d.ID: [n.ID for n in d.topology.nodes] for d in resp.devices}
                    ep.updates.append((time.monotonic(), dict(ep.devices)))
                    self.changed.notify_all()
        except grpc.RpcError:
            pass  # the plugin went away or the channel was closed

    def allocate(self, resource: str, size: int, available: list[str] | None = None) -> tuple[list[str], Any]:
        """The kubelet's allocation: preferred devices (if offered) from the healthy ones, then Allocate."""
        ep = self.endpoints[resource]
        healthy = available or sorted(i for i, h in ep.devices.items() if h == "Healthy")
        chosen = healthy[:size]
        if ep.options.get_preferred_allocation_available:
            req = api.PreferredAllocationRequest(
                container_requests=[
                    api.ContainerPreferredAllocationRequest(available_deviceIDs=healthy, allocation_size=size)
                ]
            )
            chosen = list(ep.stub.GetPreferredAllocation(req, timeout=5).container_responses[0].deviceIDs)
        resp = ep.stub.Allocate(
            api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=chosen)]), timeout=5
        )
        return chosen, resp.container_responses[0]

    # ------------------------------------------------------------------ life cycle
    def start(self) -> Kubelet:
        self.dir.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        rpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port("unix://" + str(self.dir / "kubelet.sock"))
        server.start()
        self.server = server
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=0).wait()
            self.server = None
        with self.changed:
            gone = list(self.endpoints.values())
            self.endpoints.clear()
        for ep in gone:
            ep.channel.close()

    def restart(self) -> None:
        """As a kubelet restart looks to a plugin: kubelet.sock and every plugin socket removed, a new kubelet.sock."""
        self.stop()
        for name in os.listdir(self.dir):
            os.unlink(self.dir / name)
        self.start()

    def wait(self, predicate: Any, timeout: float = 10.0) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout=timeout)
