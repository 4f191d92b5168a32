"""Sharing in the claim: the DRA driver's opaque parameters (``apiVersion: vgpukit.io/v1``), parsed strictly.

Four kinds, one JSON Schema (``vgpukit/data/schemas/dra/sharing-config.json``):

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
A refusal is one line naming the entry and the field, never quoting the value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidInput
from ...inputs import parse_k8s_quantity
from ...qos.model import CLASSES, POLICIES, unknown_keys

API_VERSION = "vgpukit.io/v1"
KINDS = ("TimeSliceConfig", "MemoryCapConfig", "MpsConfig", "QosClassConfig")
SOURCES = ("FromClass", "FromClaim")
MAX_BYTES = 1 << 50
_FIELDS = {
    "TimeSliceConfig": ({"share"}, {"class", "policy"}),
    "MemoryCapConfig": ({"limit"}, {"burst"}),
    "MpsConfig": (set(), {"activeThreadPercentage", "pinnedDeviceMemoryLimit"}),
    "QosClassConfig": (set(), {"class", "policy"}),
}


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


def _percent(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise InvalidInput(f"{what} must be an integer percent 1..100")
    return value


def parameters(doc: Any, where: str) -> tuple[str, Any]:
    """(kind, value) of one entry's ``opaque.parameters``; refused as the schema says."""
    if not isinstance(doc, dict):
        raise InvalidInput(f"{where}: parameters must be an object with apiVersion and kind")
    if doc.get("apiVersion") != API_VERSION:
        raise InvalidInput(f"{where}: apiVersion must be {API_VERSION}")
    kind = doc.get("kind")
    if kind not in _FIELDS:
        raise InvalidInput(f"{where}: kind must be one of {', '.join(KINDS)}")
    required, optional = _FIELDS[kind]
    unknown = set(doc) - required - optional - {"apiVersion", "kind"}
    if unknown:
        raise InvalidInput(f"{where}: {kind}: unknown fields {unknown_keys(unknown) or '(not names)'}")
    nulls = sorted(k for k in required | optional if k in doc and doc[k] is None)
    if nulls:
        raise InvalidInput(f"{where}: {kind}: {nulls[0]} must not be null (leave it out)")
    missing = sorted(required - set(doc))
    if missing:
        raise InvalidInput(f"{where}: {kind}: {', '.join(missing)} is required")
    if kind in ("TimeSliceConfig", "QosClassConfig"):
        cls, policy = doc.get("class", "offline"), doc.get("policy")
        if not isinstance(cls, str) or cls not in CLASSES:
            raise InvalidInput(f"{where}: {kind}: class must be online or offline")
        if policy is not None and (not isinstance(policy, str) or policy not in POLICIES):
            raise InvalidInput(f"{where}: {kind}: policy must be one of {', '.join(POLICIES)}")
        if kind == "QosClassConfig":
            return kind, QosClass(cls, policy)
        return kind, TimeSlice(cls, _percent(doc["share"], f"{where}: {kind}: share"), policy)
    if kind == "MemoryCapConfig":
        burst = None if doc.get("burst") is None else quantity(doc["burst"], f"{where}: {kind}: burst")
        return kind, MemoryCap(quantity(doc["limit"], f"{where}: {kind}: limit"), burst)
    atp, pinned = doc.get("activeThreadPercentage"), doc.get("pinnedDeviceMemoryLimit")
    return kind, Mps(
        None if atp is None else _percent(atp, f"{where}: {kind}: activeThreadPercentage"),
        None if pinned is None else quantity(pinned, f"{where}: {kind}: pinnedDeviceMemoryLimit"),
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
