"""A kubelet-side peer of the DRA plugin APIs, generated from the same upstream protos.

It does what the kubelet's plugin manager and DRA manager do with a DRA driver: finds the
registration socket in ``plugins_registry``, asks ``GetInfo`` (type ``DRAPlugin``, a supported
version ``v1.DRAPlugin``), dials the endpoint it names and answers ``NotifyRegistrationStatus``;
then ``prepare`` / ``unprepare`` claims and watch device health (``NodeWatchResources``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from vgpukit.k8s.dra_v1 import api_pb2 as dra
from vgpukit.k8s.dra_v1 import api_pb2_grpc as dra_rpc
from vgpukit.k8s.drahealth_v1 import api_pb2 as hl
from vgpukit.k8s.drahealth_v1 import api_pb2_grpc as hl_rpc
from vgpukit.k8s.pluginreg_v1 import api_pb2 as reg
from vgpukit.k8s.pluginreg_v1 import api_pb2_grpc as reg_rpc

SUPPORTED = ("v1.DRAPlugin",)


class DraKubelet:
    def __init__(self, registry: Path, resolve: Callable[[str], str]) -> None:
        self.registry = registry  # <kubelet dir>/plugins_registry, as this process reaches it
        self.resolve = resolve  # a path as the plugin names it -> the socket address here
        self.info: Any = None
        self.channel: grpc.Channel | None = None
        self.health: dict[str, tuple[int, str]] = {}
        self.changed = threading.Condition()

    def register(self) -> Any:
        (sock,) = [p for p in self.registry.iterdir() if p.name.endswith("-reg.sock")]
        with grpc.insecure_channel(f"unix://{sock}") as ch:
            stub = reg_rpc.RegistrationStub(ch)
            info = stub.GetInfo(reg.InfoRequest(), timeout=5)
            ok = info.type == "DRAPlugin" and any(v in SUPPORTED for v in info.supported_versions)
            if ok:
                self.channel = grpc.insecure_channel("unix://" + self.resolve(info.endpoint))
            stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=ok, error="" if ok else "unsupported"), timeout=5
            )
        self.info = info
        return info

    def _claims(self, claims: list[tuple[str, str, str]]) -> list[Any]:
        return [dra.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]

    def prepare(self, *claims: tuple[str, str, str]) -> Any:
        stub = dra_rpc.DRAPluginStub(self.channel)
        return stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=self._claims(list(claims))), timeout=30)

    def unprepare(self, *claims: tuple[str, str, str]) -> Any:
        stub = dra_rpc.DRAPluginStub(self.channel)
        req = dra.NodeUnprepareResourcesRequest(claims=self._claims(list(claims)))
        return stub.NodeUnprepareResources(req, timeout=30)

    def watch(self) -> Any:
        """Keep the health stream in a thread; ``self.health``: device -> (status, message)."""
        stream = hl_rpc.DRAResourceHealthStub(self.channel).NodeWatchResources(hl.NodeWatchResourcesRequest())

        def read() -> None:
            try:
                for resp in stream:
                    with self.changed:
                        for d in resp.devices:
                            self.health[d.device.device_name] = (d.health, d.message)
                        self.changed.notify_all()
            except grpc.RpcError:
                pass

        threading.Thread(target=read, daemon=True).start()
        return stream

    def wait(self, predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
