"""One read of everything the exporter shows, taken afresh for each scrape (nothing kept between two).

Each source is read once: the PCI tree (one :class:`~vgpukit.pci.Scan`, shared with the health
layer), NVML per GPU, the health record (not saved: the exporter only reads), the QoS daemon's status
(when it runs), each tenant's CUDA region, and the device inventory with its holders (one /proc scan).
A source that fails is left out of the scrape and counted in ``errors`` (the scrape itself never fails).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from ..cuda import region
from ..errors import VgpukitError
from ..health import check
from ..health import log as record_log
from ..health.model import DeviceHealth
from ..health.xid import XidTable
from ..host import Host
from ..logs import logger
from ..nvml.errors import NvmlError
from ..nvml.model import GpuInstance, GpuTelemetry, Nvml, NvmlGpu
from ..pci import Scan

log = logger("vgpukit.metrics")


@dataclass
class Gpu:
    gpu: NvmlGpu
    telemetry: GpuTelemetry | None  # None: the GPU did not answer (lost)
    instances: list[GpuInstance] = field(default_factory=list)
    profiles: dict[int, str] = field(default_factory=dict)  # GI profile id -> name
    profile_mib: dict[int, int] = field(default_factory=dict)  # GI profile id -> memory


@dataclass
class Slice:
    """A device handed out whole: a VF, an mdev, a vGPU, a MIG device (the inventory's view)."""

    kind: str  # vf | mdev | vgpu | mig
    id: str  # BDF, mdev UUID, MIG-uuid
    resource: str
    parent: str  # the PCI function it lives on
    holders: tuple[str, ...]  # who holds it open (a VM name, else a process)
    namespace: str = ""  # the prepared DRA ResourceClaim it is allocated to: its namespace and name
    claim: str = ""


@dataclass
class Snapshot:
    hostname: str
    gpus: list[Gpu] = field(default_factory=list)
    health: list[DeviceHealth] = field(default_factory=list)
    qos: dict[str, Any] | None = None  # the daemon's status reply; None: not running
    cuda: dict[str, region.Usage] = field(default_factory=dict)  # tenant -> usage
    slices: list[Slice] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # source -> 1 when it could not be read


def hostname() -> str:
    """The ``Hostname`` label: the node name a DaemonSet passes (``NODE_NAME``), else the kernel's."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


def _gpus(nvml: Nvml) -> list[Gpu]:
    out = []
    for g in nvml.gpus():
        try:
            t: GpuTelemetry | None = nvml.telemetry(g.index)
        except NvmlError:
            t = None
        entry = Gpu(g, t)
        if g.mig_current and t is not None:
            profiles = nvml.gi_profiles(g.index)
            entry.profiles = {p.id: p.name for p in profiles}
            entry.profile_mib = {p.id: p.memory_mib for p in profiles}
            entry.instances = nvml.gpu_instances(g.index)
        out.append(entry)
    return out


def _cuda(host: Host) -> dict[str, region.Usage]:
    out = {}
    for tenant in sorted(host.listdir(host.state_dir("cuda"))):
        usage = region.read_usage(host, tenant)
        if usage is not None:
            out[tenant] = usage
    return out


def _qos(host: Host) -> dict[str, Any] | None:
    from ..qos import control

    if not host.exists(control.socket_path(host)):
        return None
    return control.request(host, {"op": "status"}, timeout=2.0)


def _slices(host: Host, nvml: Nvml | None, scan: Scan, model: Any = None) -> list[Slice]:
    from ..node.claimed import claims_by_id
    from ..node.inventory import PREFIX, Options, collect, with_holders

    kept = model.get("inventory") if model is not None else None
    inv = with_holders(host, kept) if kept is not None else collect(host, nvml, Options(replicas=0), scan=scan)
    claims = claims_by_id(host, inv)
    out = []
    for resource, devices in inv.resources.items():
        short = resource.removeprefix(f"{PREFIX}/")
        kind = short.split("-", 1)[0]
        for d in devices:
            c = claims.get(d.id)
            out.append(Slice(kind, d.id, short, d.topo_bdf, d.held_by, c.namespace if c else "", c.name if c else ""))
    return out


def _health(host: Host, nvml: Nvml | None, table: XidTable, scan: Scan) -> list[DeviceHealth]:
    """What ``vgpukit health`` answers, its record not saved (the exporter only reads)."""
    return check.look(host, nvml, table, record_log.load(host), scan=scan).devices


def take(host: Host, nvml: Nvml | None, xids: XidTable, model: Any = None) -> Snapshot:
    """Everything, read now (``xids``: the XID table, loaded once by the caller). ``model``: the watch's
    (:mod:`vgpukit.node.views` ``inventory``, :mod:`vgpukit.health.watched` ``health``), kept current by
    what changes: the devices and their health come from it, who holds them is read now, as NVML's
    telemetry, the QoS daemon's status and the tenants' CUDA regions are (the scrape is what asks)."""
    snap = Snapshot(hostname())
    scan = Scan(host)  # one PCI read, shared by the health layer and the inventory (none with a model)
    kept = model.get("health") if model is not None else None

    def health() -> list[DeviceHealth]:
        return list(kept) if kept is not None else _health(host, nvml, xids, scan)

    steps: list[tuple[str, Any]] = [
        ("health", lambda: setattr(snap, "health", health())),
        ("qos", lambda: setattr(snap, "qos", _qos(host))),
        ("cuda", lambda: setattr(snap, "cuda", _cuda(host))),
        ("inventory", lambda: setattr(snap, "slices", _slices(host, nvml, scan, model))),
    ]
    if nvml is not None:
        steps.insert(0, ("nvml", lambda: setattr(snap, "gpus", _gpus(nvml))))
    for source, read in steps:
        try:
            read()
            snap.errors[source] = 0
        except (VgpukitError, OSError) as exc:
            log.warning("%s not read: %s", source, exc)
            snap.errors[source] = 1
    return snap
