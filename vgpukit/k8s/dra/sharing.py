"""Sharing in the claim: what a prepared claim's opaque configuration (:mod:`.config`) makes on the host.

No rule of an area is made here; each kind goes through its area:

* **time-slice** -> a QoS tenant ``dra-<claim uid>`` of the device (the GPU's UUID or the MIG device's
  as the QoS GPU key) whose target is the pod's cgroup, added through the QoS daemon (its planner
  refuses shares over 100%, a 65th tenant...; the same planner is asked first, so a refusal changes
  nothing); the claim's CDI edits carry the tenant identity, the CUDA library, its directory and the
  demand socket (:func:`vgpukit.cdi.share.tenant_edits`, as the gpu-share class);
* **memory cap** -> the CUDA interception library preloaded with ``VGPUKIT_CUDA_MEMORY`` (and the
  time-slice tenant's ``memory`` when there is one): the library must be installed;
* **MPS** -> :mod:`.mps` (one control daemon per GPU or MIG device).

Conflicts (MPS and time-slicing on one device, two requests of one device configured differently) are
refused here, before anything changes. The record lists what was made (:func:`undo` removes exactly it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ...cdi.nvidia import Edits
from ...cdi_settings import host_path
from ...engine.env import Env
from ...engine.step import Step, step_kind
from ...errors import Conflict, InvalidInput, NotFound, Unsupported, VerifyFailed
from ...host import Host
from ...qos.model import DEFAULT_SLICE_MS
from . import mps
from .config import Sharing

if TYPE_CHECKING:
    from ...cdi_settings import Settings
    from ...qos.model import QosConfig, Tenant
    from .devices import DraDevice

SHAREABLE = ("gpu", "mig")


class Result(Protocol):
    """One allocated device of the claim with its request's settings (:class:`.claims.Result`)."""

    @property
    def request(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def sharing(self) -> Sharing: ...
    @property
    def pods(self) -> tuple[str, ...]: ...


# the pod's cgroup as the kubelet makes it (systemd and cgroupfs drivers; guaranteed, burstable, best-effort)
POD_CGROUPS = (
    "kubepods.slice/kubepods-pod{u}.slice",
    "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice",
    "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice",
    "kubepods/pod{uid}",
    "kubepods/burstable/pod{uid}",
    "kubepods/besteffort/pod{uid}",
)


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    edits: dict[str, Edits] = field(default_factory=dict)  # DRA device name -> the claim's extra edits
    record: list[dict[str, Any]] = field(default_factory=list)  # what was made, for unprepare

    def merge(self, other: Plan) -> None:
        """``other`` (of other devices of the claim) added to this plan."""
        self.steps += other.steps
        self.edits.update(other.edits)
        self.record += other.record


class Qos:
    """What the QoS daemon runs, read once when a claim's first tenant asks, then changed by each tenant
    planned (so a claim's tenants are checked together by the QoS planner)."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.cfg: QosConfig | None = None

    def running(self) -> QosConfig:
        from ...qos import planner

        if self.cfg is None:
            self.cfg = planner.running(self.env.host)[0]
        return self.cfg

    def add(self, name: str, key: str, tenant: Tenant, policy: str | None) -> list[Step]:
        """The steps adding ``tenant`` to the QoS GPU ``key`` (device ``name``), with the GPU's ``policy`` when
        the claim asks one: refused by the QoS planner's rules, or when the GPU's tenants run under another
        policy, or while an MPS daemon serves the device; nothing done."""
        from ...qos import planner

        steps: list[Step] = []
        gpu = self.running().gpus.get(key)
        if policy and (gpu.policy if gpu else "best-effort") != policy:
            if gpu is not None and gpu.tenants:  # the policy is the GPU's: its tenants run under it
                why = f"its {len(gpu.tenants)} QoS tenants run under {gpu.policy}, the claim asks {policy}"
                raise Conflict(f"device {name}: {why}")
            self.cfg = planner.change(self.running(), planner.SetPolicy(key, policy, None)).config
            steps.append(QosPolicy(key, policy))
        if mps.running(self.env.host, key):
            raise Conflict(f"device {name}: an MPS daemon serves it (another claim): no time-slicing on it")
        self.cfg = planner.change(self.running(), planner.AddTenant(key, tenant.validate())).config  # its refusals
        return [*steps, QosTenant(key, tenant.name, tenant.to_dict())]


def tenant_name(uid: str) -> str:
    return f"dra-{uid}"[:128]


def pod_cgroup(host: Host, pods: tuple[str, ...]) -> str:
    """The cgroup (as the host shows it) of the one pod the claim is reserved for."""
    if len(pods) != 1:
        raise InvalidInput(f"a time-sliced claim is one QoS tenant: it must be reserved for one pod, not {len(pods)}")
    uid = pods[0]
    for pattern in POD_CGROUPS:
        path = host.sys("fs", "cgroup", *pattern.format(u=uid.replace("-", "_"), uid=uid).split("/"))
        if host.is_dir(path):
            return host.display(path)
    raise NotFound(f"the cgroup of pod {uid} is not on this node (kubepods under /sys/fs/cgroup)")


def _per_device(results: Sequence[Result]) -> dict[str, Result]:
    by: dict[str, Result] = {}
    for r in results:
        other = by.setdefault(r.device, r)
        if other.sharing != r.sharing:
            raise Conflict(
                f"device {r.device}: requests {other.request} and {r.request} configure its sharing differently"
            )
    return by


def plan(env: Env, uid: str, results: Sequence[Result], offered: dict[str, DraDevice], settings: Settings) -> Plan:
    """The steps, edits and record of the claim's sharing; refused (nothing done) on a conflict."""
    from ...qos.model import Tenant
    from .capacity import qos_key

    out = Plan()
    qos = Qos(env)
    for name, r in sorted(_per_device(results).items()):
        want: Sharing = r.sharing
        if want.empty:
            continue
        dev = offered[name]
        if dev.kind not in SHAREABLE:
            raise InvalidInput(f"device {name}: sharing applies to whole GPUs and MIG devices, not a {dev.kind}")
        if want.qos_class is not None:
            raise InvalidInput(f"device {name}: QosClassConfig applies to devices shared by capacity (shared-...)")
        if want.time_slice and want.mps:
            raise Conflict(f"device {name}: MPS and time-slicing (TimeSliceConfig) cannot share one device at once")
        key = qos_key(dev)  # the GPU's or MIG device's UUID: the QoS GPU key
        tenant = tenant_name(uid)
        library = env.host.is_file(host_path(env.host, settings.cuda_library))
        if want.memory is not None and not library:
            raise Unsupported(
                f"a memory cap needs the CUDA interception library {settings.cuda_library} (docs/cuda.md)"
            )
        edits = Edits()
        if want.time_slice:
            ts = want.time_slice
            cgroup = pod_cgroup(env.host, r.pods)
            t = Tenant(
                tenant,
                ts.cls,
                ts.share,
                "cgroup",
                cgroup=cgroup,
                demand="auto",
                memory=want.memory,
                memory_burst=want.memory_burst,
            )
            out.steps += qos.add(name, key, t, ts.policy)
            out.record.append({"device": name, "qosTenant": {"gpu": key, "name": tenant}})
            if library:
                edits += tenant_edits(env, settings, tenant, key)
            else:
                edits += Edits(env=(f"VGPUKIT_QOS_TENANT={tenant}", f"VGPUKIT_QOS_GPU={key}"))
        elif want.memory is not None:
            edits += tenant_edits(env, settings, tenant, None)
        if want.memory is not None:
            edits += Edits(env=(f"VGPUKIT_CUDA_MEMORY={want.memory}",))
        if want.memory_burst is not None:
            cls = want.time_slice.cls if want.time_slice else "offline"  # the QoS planner refuses it online
            edits += Edits(env=(f"VGPUKIT_CUDA_MEMORY_BURST={want.memory_burst}", f"VGPUKIT_CUDA_CLASS={cls}"))
        if want.mps:
            gpu = qos.running().gpus.get(key)
            if gpu is not None and gpu.tenants:
                raise Conflict(
                    f"device {name}: the QoS daemon time-slices it ({len(gpu.tenants)} tenants): no MPS on it"
                )
            made = mps.plan(env, uid, key, want.mps)
            out.steps += made.steps
            edits += made.edits
            out.record.append({"device": name, "mps": made.record})
        out.edits[name] = edits
    return out


def tenant_edits(env: Env, settings: Settings, tenant: str, key: str | None) -> Edits:
    from ...cdi.share import tenant_edits as edits

    return edits(env.host, settings, tenant, key)


def undo(env: Env, uid: str, record: list[Any]) -> list[Step]:
    """The steps that remove what the claim's record says its sharing made (the last MPS client stops its daemon)."""
    steps: list[Step] = []
    for entry in record:
        entry = entry if isinstance(entry, dict) else {}
        t = entry.get("qosTenant")
        if isinstance(t, dict) and isinstance(t.get("gpu"), str) and isinstance(t.get("name"), str):
            steps.append(QosTenant(t["gpu"], t["name"], None))
        if isinstance(entry.get("mps"), dict):
            steps += mps.undo(env, uid, entry["mps"])
    return steps


def _tenant_now(host: Host, gpu: str, name: str) -> dict[str, Any] | None:
    from ...qos.planner import running

    found = running(host)[0].gpus.get(gpu)
    return next((t.to_dict() for t in found.tenants if t.name == name), None) if found else None


@step_kind
@dataclass(frozen=True)
class QosTenant(Step):
    """Ensure the QoS tenant ``name`` of ``gpu`` is ``tenant`` (a tenant document), or absent (None).
    Through the daemon's control socket; when no daemon runs, a removal edits its run-time record
    (the daemon applies it at its next start), an addition is refused (the daemon is needed)."""

    kind: ClassVar[str] = "dra-qos-tenant"
    gpu: str
    name: str
    tenant: dict[str, Any] | None

    def describe(self) -> str:
        if self.tenant is None:
            return f"remove QoS tenant {self.name} from {self.gpu}"
        return f"add QoS tenant {self.name} to {self.gpu} ({self.tenant.get('class')} {self.tenant.get('share')}%)"

    def inverse(self, env: Env) -> Step:
        return QosTenant(self.gpu, self.name, _tenant_now(env.host, self.gpu, self.name))

    def apply(self, env: Env) -> None:
        from ...qos import control
        from ...qos.config import Overlay
        from ...qos.model import Tenant

        now = _tenant_now(env.host, self.gpu, self.name)
        if now == self.tenant:
            return
        try:
            control.request(env.host, {"op": "ping"}, timeout=5)
        except NotFound:
            if self.tenant is not None and not env.recovering:
                raise NotFound(
                    "the QoS daemon is not running: a time-sliced or shared claim needs it (vgpukit qos daemon)"
                ) from None
            overlay = Overlay.load(env.host)  # no daemon: its record, applied when it starts
            if self.tenant is None:
                overlay.forget_tenant(self.gpu, self.name)
            else:  # putting back a tenant an interrupted unprepare removed
                overlay.record_tenant(self.gpu, self.name, Tenant.from_dict(self.name, self.tenant))
            overlay.save(env.host)
            return
        if now is not None:
            control.request(env.host, {"op": "tenant-rm", "gpu": self.gpu, "name": self.name})
        if self.tenant is not None:
            control.request(env.host, {"op": "tenant-add", "gpu": self.gpu, "name": self.name, "tenant": self.tenant})

    def verify(self, env: Env) -> None:
        if _tenant_now(env.host, self.gpu, self.name) != self.tenant:
            raise VerifyFailed(f"QoS tenant {self.name} of {self.gpu} is not as asked")


def _policy_now(host: Host, gpu: str) -> str:
    from ...qos.planner import running

    found = running(host)[0].gpus.get(gpu)
    return found.policy if found else "best-effort"


@step_kind
@dataclass(frozen=True)
class QosPolicy(Step):
    """Ensure the QoS policy of ``gpu`` (through the daemon; a recovery with no daemon edits its run-time
    record). The first time-sliced claim of a GPU without tenants sets it; it stays after the claim (a
    GPU without tenants is not scheduled, whatever its policy)."""

    kind: ClassVar[str] = "dra-qos-policy"
    gpu: str
    policy: str

    def describe(self) -> str:
        return f"set the QoS policy of {self.gpu} to {self.policy}"

    def inverse(self, env: Env) -> Step:
        return QosPolicy(self.gpu, _policy_now(env.host, self.gpu))

    def apply(self, env: Env) -> None:
        from ...qos import control
        from ...qos.config import Overlay
        from ...qos.planner import running

        if _policy_now(env.host, self.gpu) == self.policy:
            return
        try:
            control.request(env.host, {"op": "set", "gpu": self.gpu, "policy": self.policy})
        except NotFound:
            if not env.recovering:
                raise NotFound("the QoS daemon is not running: a time-sliced claim needs it") from None
            gpu = running(env.host)[0].gpus.get(self.gpu)
            overlay = Overlay.load(env.host)
            overlay.record_policy(self.gpu, self.policy, gpu.slice_ms if gpu else DEFAULT_SLICE_MS)
            overlay.save(env.host)

    def verify(self, env: Env) -> None:
        if _policy_now(env.host, self.gpu) != self.policy:
            raise VerifyFailed(f"the QoS policy of {self.gpu} is not {self.policy}")
