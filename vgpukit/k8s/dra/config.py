"""Sharing in the claim: the DRA driver's opaque parameters (``apiVersion: vgpukit.io/v1``), parsed strictly.

Four kinds, declared once below (``msgspec.Struct`` types with their bounds): the declaration checks the
parameters (:func:`vgpukit.declared.convert`) and is the JSON Schema that ships
(``vgpukit/data/schemas/dra/sharing-config.json``, written by ``scripts/gen_schemas.py``):

* ``TimeSliceConfig`` {``class``: online|offline (default offline), ``share``: 1..100, ``policy``}: a QoS
  tenant (the QoS planner's rules, docs/qos.md);
* ``MemoryCapConfig`` {``limit``: bytes or a Kubernetes quantity, ``4Gi``, ``4G``; ``burst``}: the CUDA
  interception library's cap (docs/cuda.md), and for an offline tenant a burst of unified memory beyond
  it (docs/qos.md, "Memory QoS");
* ``MpsConfig`` {``activeThreadPercentage``: 1..100, ``pinnedDeviceMemoryLimit``: a quantity too};
* ``QosClassConfig`` {``class``: online|offline (default offline), ``policy``}: the QoS class of a share of a
  device shared by capacity (:mod:`.shares`: its share and memory cap are the allocation's).

They come in the allocation result's ``config[]`` (``source`` FromClass/FromClaim, ``requests``: the
requests they apply to, empty for all, ``main`` also covering ``main/sub``; ``opaque{driver,
parameters}``). Precedence (docs/kubernetes.md): class entries first, then the claim's, each in list
order; for one kind, a later entry replaces an earlier one. Entries of other drivers are ignored.
A refusal is one line naming the entry and the path of the field in its parameters (``config entry 2:
$.share: expected int >= 1``), never quoting the value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from ...declared import convert, text_sizes
from ...errors import InvalidInput
from ...inputs import parse_k8s_quantity
from ...qos.document import ClassName, PolicyName  # the QoS config's own classes and policies

API_VERSION = "vgpukit.io/v1"
SOURCES = ("FromClass", "FromClaim")
MAX_BYTES = 1 << 50

# ---- the declaration: what a config entry's ``opaque.parameters`` may be (and its JSON Schema)
_QUANTITY_FORM = r"^[+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?$"
QUANTITY_FORM = (
    "bytes: an integer, or a Kubernetes quantity (4Gi, 1.5Gi, 4G = 4*10^9, 1e9) that comes to whole bytes, "
    "at most 1 PiB"
)
Quantity = (
    Annotated[int, Meta(ge=1, le=MAX_BYTES)]
    | Annotated[
        str,
        Meta(max_length=64, pattern=_QUANTITY_FORM, description=QUANTITY_FORM),
    ]
)
Percent = Annotated[int, Meta(ge=1, le=100)]
Policy = Annotated[
    PolicyName,
    Meta(description="the GPU's QoS policy: set by the first time-sliced claim (or share) of a GPU without tenants"),
]
ApiVersion = Literal["vgpukit.io/v1"]


class _Kind(msgspec.Struct, forbid_unknown_fields=True, frozen=True, tag_field="kind"):
    api_version: ApiVersion = msgspec.field(name="apiVersion")


class TimeSliceConfig(_Kind, tag=True, frozen=True):
    """A QoS tenant (vgpukit qos, docs/qos.md) for the pod's cgroup on the device."""

    share: Percent
    cls: ClassName = msgspec.field(name="class", default="offline")
    policy: Policy | msgspec.UnsetType = msgspec.UNSET


class MemoryCapConfig(_Kind, tag=True, frozen=True):
    """A device memory cap enforced by the CUDA interception library (docs/cuda.md); for offline tenants a
    burst of unified memory beyond it, lent back under pressure (docs/qos.md, Memory QoS)."""

    limit: Quantity
    burst: Quantity | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:  # a quantity's value: whole bytes, 1 byte to 1 PiB (no schema says it)
        text_sizes(self, QUANTITY_FORM, "limit", "burst", lo=1, hi=MAX_BYTES, k8s=True)


class MpsConfig(_Kind, tag=True, frozen=True):
    """NVIDIA MPS: one control daemon per GPU or MIG device, started and stopped by the driver."""

    active_thread_percentage: Percent | msgspec.UnsetType = msgspec.field(
        name="activeThreadPercentage", default=msgspec.UNSET
    )
    pinned_device_memory_limit: Quantity | msgspec.UnsetType = msgspec.field(
        name="pinnedDeviceMemoryLimit", default=msgspec.UNSET
    )

    def __post_init__(self) -> None:
        text_sizes(self, QUANTITY_FORM, "pinned_device_memory_limit", lo=1, hi=MAX_BYTES, k8s=True)


class QosClassConfig(_Kind, tag=True, frozen=True):
    """The QoS class (and the GPU's policy) of a share of a device shared by capacity: its compute share and
    memory cap are what the scheduler allocated (docs/kubernetes.md, 'GPUs shared by capacity')."""

    cls: ClassName = msgspec.field(name="class", default="offline")
    policy: Policy | msgspec.UnsetType = msgspec.UNSET


Parameters = TimeSliceConfig | MemoryCapConfig | MpsConfig | QosClassConfig


@dataclass(frozen=True)
class TimeSlice:
    cls: str  # online | offline
    share: int  # percent
    policy: str | None = None  # the GPU's policy the claim expects (None: whatever it runs)


@dataclass(frozen=True)
class MemoryCap:
    limit: int  # bytes per device
    burst: int | None = None  # unified memory beyond the limit (offline tenants: memory QoS)


@dataclass(frozen=True)
class Mps:
    thread_percentage: int | None = None
    pinned_memory: int | None = None  # bytes per device


@dataclass(frozen=True)
class QosClass:
    cls: str  # online | offline
    policy: str | None = None


@dataclass(frozen=True)
class Sharing:
    """What one request's device is shared with (all None: not shared, a plain device)."""

    time_slice: TimeSlice | None = None
    memory: int | None = None
    mps: Mps | None = None
    qos_class: QosClass | None = None  # a share of a device shared by capacity (:mod:`.shares`)
    memory_burst: int | None = None  # MemoryCapConfig's burst (memory QoS)

    @property
    def empty(self) -> bool:
        return self == Sharing()

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.time_slice:
            doc["timeSlice"] = {"class": self.time_slice.cls, "share": self.time_slice.share}
            if self.time_slice.policy:
                doc["timeSlice"]["policy"] = self.time_slice.policy
        if self.memory is not None:
            doc["memoryCap"] = self.memory
        if self.memory_burst is not None:
            doc["memoryBurst"] = self.memory_burst
        if self.mps:
            doc["mps"] = {"activeThreadPercentage": self.mps.thread_percentage, "pinned": self.mps.pinned_memory}
        if self.qos_class:
            doc["qosClass"] = {"class": self.qos_class.cls}
            if self.qos_class.policy:
                doc["qosClass"]["policy"] = self.qos_class.policy
        return doc


@dataclass(frozen=True)
class Entry:
    requests: tuple[str, ...]
    kind: str
    value: Any  # TimeSlice | MemoryCap | Mps

    def applies(self, request: str) -> bool:
        return not self.requests or request in self.requests or request.partition("/")[0] in self.requests


@dataclass(frozen=True)
class Configs:
    entries: tuple[Entry, ...] = field(default=())

    def for_request(self, request: str) -> Sharing:
        """The request's settings: for each kind, the last entry that applies (entries are in precedence order)."""
        got: dict[str, Any] = {}
        for e in self.entries:
            if e.applies(request):
                got[e.kind] = e.value
        cap = got.get("MemoryCapConfig")
        ts, mps, qc = got.get("TimeSliceConfig"), got.get("MpsConfig"), got.get("QosClassConfig")
        return Sharing(ts, cap and cap.limit, mps, qc, cap and cap.burst)


def quantity(value: Any, what: str) -> int:
    """Bytes as Kubernetes reads a quantity (``4Gi``, ``1.5Gi``, ``4G`` = 4*10^9): the one parser of
    Kubernetes quantities (:func:`vgpukit.inputs.parse_k8s_quantity`), 1 byte to 1 PiB."""
    return parse_k8s_quantity(value, what, lo=1, hi=MAX_BYTES)


def _opt(value: Any) -> Any:
    return None if value is msgspec.UNSET else value


def parameters(doc: Any, where: str) -> tuple[str, Any]:
    """(kind, value) of one entry's ``opaque.parameters``, checked by the declaration (``$`` in a refusal
    is the parameters)."""
    p: Parameters = convert(doc, Parameters, where)
    kind = type(p).__name__
    if isinstance(p, QosClassConfig):
        return kind, QosClass(p.cls, _opt(p.policy))
    if isinstance(p, TimeSliceConfig):
        return kind, TimeSlice(p.cls, p.share, _opt(p.policy))
    if isinstance(p, MemoryCapConfig):
        burst = None if p.burst is msgspec.UNSET else quantity(p.burst, f"{where}: $.burst")
        return kind, MemoryCap(quantity(p.limit, f"{where}: $.limit"), burst)
    pinned = p.pinned_device_memory_limit
    return kind, Mps(
        _opt(p.active_thread_percentage),
        None if pinned is msgspec.UNSET else quantity(pinned, f"{where}: $.pinnedDeviceMemoryLimit"),
    )


def configs(entries: Any, driver: str) -> Configs:
    """This driver's entries of ``status.allocation.devices.config``, in precedence order."""
    ranked: list[tuple[int, int, Entry]] = []
    for i, cfg in enumerate(entries if isinstance(entries, list) else []):
        cfg = cfg if isinstance(cfg, dict) else {}
        opaque = cfg.get("opaque")
        if not isinstance(opaque, dict) or opaque.get("driver") != driver:
            continue
        where = f"config entry {i + 1}"
        source = cfg.get("source", "FromClaim")
        if source not in SOURCES:
            raise InvalidInput(f"{where}: source must be FromClass or FromClaim")
        requests = cfg.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) and 0 < len(r) <= 253 for r in requests):
            raise InvalidInput(f"{where}: requests must be a list of request names")
        kind, value = parameters(opaque.get("parameters"), where)
        ranked.append((SOURCES.index(source), i, Entry(tuple(requests), kind, value)))
    return Configs(tuple(e for _s, _i, e in sorted(ranked, key=lambda t: (t[0], t[1]))))
